"""Fixtures for controller tests: a real simcluster API server on loopback, real clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import pytest

from kube import ClientSettings, KubeClient, Timeouts
from simcluster.apiserver import ServerSettings
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster

FAST = ClientSettings(
    timeouts=Timeouts(connect=2.0, request=5.0, watch_idle=5.0),
    qps=0,
    backoff_base=0.01,
    backoff_cap=0.05,
)


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


async def inject(client: KubeClient, **fault: Any) -> None:
    """Apply a simcluster fault (``POST /admin/faults``) over the real HTTP endpoint."""
    await client.request("POST", "/admin/faults", body=fault)


def pod(name: str, *, scheduler: str = "sandman", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "task",
                    "image": "registry.local/task:1",
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                }
            ],
        },
    }


async def eventually(cond: Callable[[], bool], within: float = 10.0) -> None:
    """Poll ``cond`` until true (watch-driven state converges asynchronously)."""
    with anyio.fail_after(within):
        while not cond():  # noqa: ASYNC110 - the state is plain attributes, no event to wait on
            await anyio.sleep(0.01)
