"""The local stack for the harness integrations: simcluster in process mode, the controller
and one facade, once per test module (tests/support/stack.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.stack import StackSettings
from tests.support.stack import RunningStack, running_stack


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[RunningStack]:
    workdir = Path(tmp_path_factory.mktemp("stack"))
    settings = StackSettings(workdir=workdir, controller_args=("--gc-terminal-retention-s", "2"))
    with running_stack(settings, pytestconfig) as running:
        yield running


@pytest.fixture
def owner() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"
