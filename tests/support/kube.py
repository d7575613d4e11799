"""The Kubernetes client layer (``kube``) as tests drive it against an embedded simcluster:
client settings that fail fast, simcluster's fault injection over its HTTP endpoint, and the
fixtures of a real API server on loopback with a real client (``tests/kube`` and
``tests/controller`` import them into their conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from kube import ClientSettings, KubeClient, Timeouts
from simcluster.apiserver import ServerSettings
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster

__all__ = ["FAST", "client", "cluster", "cluster_settings", "inject"]

#: Short timeouts, no client-side rate limit, quick retries: a test's mistake or an injected
#: fault shows within seconds, not after production's patient back-off.
FAST = ClientSettings(
    timeouts=Timeouts(connect_s=2.0, request_s=5.0, watch_idle_s=5.0),
    qps=0,
    backoff_base_s=0.01,
    backoff_cap_s=0.05,
)


async def inject(client: KubeClient, **fault: Any) -> None:
    """Apply a simcluster fault (``POST /admin/faults``) over the real HTTP endpoint."""
    await client.request("POST", "/admin/faults", body=fault)


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
