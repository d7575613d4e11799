"""Fixtures for controller tests: a real simcluster API server on loopback, real clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from kube import KubeClient
from simcluster.apiserver import ServerSettings
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.kube import FAST


@pytest.fixture
def cluster_settings() -> ServerSettings | ClusterSettings:
    """Override in a test module to change the server or add nodes."""
    return ServerSettings(bookmark_interval_s=0.2)


@pytest.fixture
def cluster(cluster_settings: ServerSettings | ClusterSettings) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(cluster_settings) as c:
        yield c


@pytest.fixture
async def client(cluster: EmbeddedCluster) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as c:
        yield c
