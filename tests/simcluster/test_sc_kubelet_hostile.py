"""A simulated kubelet survives a hostile pod: one whose requests it cannot parse, stored as
an older (or more lenient) API server would have accepted it. The pod fails as a kubelet
fails it (phase Failed, reason UnexpectedAdmissionError), the error is counted, and the
node's pod loop goes on starting the next pod — before, the loop died while the Lease kept
renewing, so the node looked Ready and never started another pod.

The hostile object is written into the store directly: the API server now refuses such a
quantity at decode (400), which is the point of that check, so no client can send one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings
from tests.support.wait import wait_until

NODE = NodeSettings(start_latency_s=0.05, start_jitter_s=0.0, lease_interval_s=0.5)


@pytest.fixture
def sim() -> Iterator[tuple[EmbeddedCluster, client.CoreV1Api]]:
    with (
        EmbeddedCluster(ClusterSettings(nodes=1, node=NODE)) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        yield cluster, client.CoreV1Api(ac)


def _pod(name: str, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "i:1", "resources": {"requests": {"cpu": "100m"}}}]
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def _store_hostile(cluster: EmbeddedCluster, name: str, node: str) -> None:
    """Create ``name`` unbound, then rewrite it in the store bound to ``node`` with a CPU
    request no parser accepts."""
    assert cluster.server is not None
    core = cluster.server.core
    pods = core.registry.get("", "v1", "pods")
    assert pods is not None

    async def write() -> None:
        old = core.create(pods, "default", _pod(name))
        new = core.get(pods, "default", name)
        new = {**new, "spec": {**new["spec"], "nodeName": node}}
        new["spec"]["containers"] = [
            {**new["spec"]["containers"][0], "resources": {"requests": {"cpu": "lots"}}}
        ]
        core.write(pods, new, old)

    cluster.call(write)


def _status(v1: client.CoreV1Api, name: str) -> Any:
    return v1.read_namespaced_pod(name, "default").status


def test_a_pod_the_kubelet_cannot_parse_fails_alone(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    cluster, v1 = sim
    _store_hostile(cluster, "hostile", "node-0")
    wait_until(lambda: _status(v1, "hostile").phase == "Failed")
    status = _status(v1, "hostile")
    assert status.reason == "UnexpectedAdmissionError"
    assert "lots" in status.message
    # the node's loop still works: the next pod bound to it runs
    v1.create_namespaced_pod("default", _pod("after", node="node-0"))
    wait_until(lambda: _status(v1, "after").phase == "Running")
    assert cluster.server is not None
    metrics = cluster.server.metrics.render().decode()
    assert 'simcluster_kubelet_pod_errors_total{stage="admit"} 1.0' in metrics
    # and deleting the hostile pod is handled too (the kubelet removes it)
    v1.delete_namespaced_pod("hostile", "default")
    wait_until(lambda: not [p for p in v1.list_namespaced_pod("default").items
                            if p.metadata.name == "hostile"])  # fmt: skip
