"""Session fixtures of the cri runtime's tests: one private containerd + registry with the
test images (tests/support/cri.py) and the daemon bundle, built once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.sandbox import bundle
from tests.support.cri import CriHost, start_cri_host


@pytest.fixture(scope="session")
def cri_host(pytestconfig: pytest.Config) -> Iterator[CriHost]:
    host = start_cri_host(pytestconfig)
    try:
        yield host
    finally:
        host.stop()


@pytest.fixture(scope="session")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The daemon bundle (the real build behind `make bundle`, ~15-40 s)."""
    root = tmp_path_factory.mktemp("bundle")
    out = root / "daemon-bundle"
    bundle.build(out, work=root / "work")
    return out
