"""Fixtures of the node agent's tests: an embedded cluster whose nodes serve CRI (override
``cluster_settings`` in a module), and a light client as the test's own hand on the API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from kube.light import LightClient
from kube.settings import ClientSettings, Timeouts
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.agents import agent_cluster


@pytest.fixture
def cluster_settings() -> ClusterSettings:
    return agent_cluster(base_s=0.3)


@pytest.fixture
def cluster(cluster_settings: ClusterSettings) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(cluster_settings) as c:
        yield c


@pytest.fixture
async def api(cluster: EmbeddedCluster) -> AsyncIterator[LightClient]:
    settings = ClientSettings(qps=0, timeouts=Timeouts(connect_s=2, request_s=5, watch_idle_s=5))
    async with await LightClient.connect(settings, kubeconfig=str(cluster.kubeconfig)) as c:
        yield c
