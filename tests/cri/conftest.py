"""Fixtures of the cri runtime's tests: one private containerd + registry with the test
images per session (tests/support/cri.py), and the whole stack on it per module. The daemon
bundle is the suite's session fixture (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.stack import StackSettings
from tests.support.cri import CriHost, start_cri_host
from tests.support.stack import RunningStack, running_stack


@pytest.fixture(scope="session")
def cri_host(pytestconfig: pytest.Config) -> Iterator[CriHost]:
    host = start_cri_host(pytestconfig)
    try:
        yield host
    finally:
        host.stop()


@pytest.fixture(scope="module")
def cri_stack(
    cri_host: CriHost,
    bundle_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[RunningStack]:
    """The stack (simcluster's ``cri`` profile on this containerd, the controller, the
    facade, the node agent) as in a real deployment: the agent keeps the bundle on the node
    (``bundle_source`` -> ``<workdir>/bundle/current``) and the facade mounts it by hostPath."""
    workdir = Path(tmp_path_factory.mktemp("cri-stack"))
    bundle_root = workdir / "bundle"
    settings = StackSettings(
        workdir=workdir,
        profile="cri",
        simcluster_overrides=(f"cri_socket={cri_host.socket}",),
        node_agents=True,
        node_agent_args=(
            "--min-write-interval-s=0.2",
            "--reconcile-interval-s=1",
            f"--bundle-source={bundle_dir}",
            f"--bundle-root={bundle_root}",
        ),
        delivery={"mode": "host-path", "host_path": str(bundle_root / "current")},
        controller_args=("--gc-terminal-retention-s", "2"),
    )
    with running_stack(settings, pytestconfig) as running:
        yield running
