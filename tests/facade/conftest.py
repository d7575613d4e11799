"""A real facade in the test's event loop, against a real simcluster API server on loopback
(tests/support/facade.py). The API server has no nodes, so sandboxes stay ``pending``:
enough for everything the facade decides itself (validation, admission, listing, waits,
shutdown) without starting processes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from facade.app import FacadeSettings
from simcluster.apiserver import ServerSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.facade import LiveFacade, live_facade
from tests.support.kube import FAST


@pytest.fixture
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(ServerSettings(bookmark_interval_s=0.2)) as c:
        yield c


@pytest.fixture
def facade_settings() -> FacadeSettings:
    """Override in a module to change the facade's settings."""
    return FacadeSettings(port=0, client=FAST)


@pytest.fixture
async def live(
    cluster: EmbeddedCluster, facade_settings: FacadeSettings, tmp_path: Path
) -> AsyncIterator[LiveFacade]:
    async with live_facade(cluster.kubeconfig, facade_settings, tmp_path) as running:
        yield running
