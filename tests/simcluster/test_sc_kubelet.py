"""Simulated kubelets (virtual runtime), seen through the official client: node registration
and leases, binding -> Running/Ready with a loopback pod IP, admission failures, image pulls
in node.status.images, the per-node creation rate, graceful deletion, node faults."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import yaml
from kubernetes import client, config

from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.images import PullSettings
from simcluster.kubelet.settings import NodeSettings
from tests.support.wait import wait_until

NODE = NodeSettings(
    cpu="1",
    memory="2Gi",
    max_pods=3,
    creation_rate=5.0,
    start_latency_s=0.05,
    start_jitter_s=0.01,
    pull=PullSettings(base_s=0.3, parallelism=1, default_size=50 * 2**20),
    preloaded_images=("present:1",),
    lease_interval_s=0.5,
)


@pytest.fixture
def sim() -> Iterator[tuple[EmbeddedCluster, client.CoreV1Api]]:
    with (
        EmbeddedCluster(ClusterSettings(nodes=2, node=NODE)) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        yield cluster, v1


def pod(name: str, image: str = "present:1", cpu: str = "100m") -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "sandman",
            "containers": [
                {
                    "name": "c",
                    "image": image,
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                }
            ],
        },
    }


def bind(v1: client.CoreV1Api, name: str, node: str) -> None:
    body = {"metadata": {"name": name}, "target": {"kind": "Node", "name": node}}
    v1.create_namespaced_pod_binding(name, "t", body, _preload_content=False).release_conn()


def phase(v1: client.CoreV1Api, name: str) -> str:
    return str(v1.read_namespaced_pod(name, "t").status.phase)


def test_nodes_register_with_capacity_and_leases(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    cluster, v1 = sim
    nodes = v1.list_node().items
    assert [n.metadata.name for n in nodes] == ["node-0", "node-1"]
    n0 = nodes[0]
    assert n0.status.capacity == {
        "cpu": "1",
        "memory": "2Gi",
        "pods": "3",
        "ephemeral-storage": "100Gi",
    }
    assert {c.type: c.status for c in n0.status.conditions}["Ready"] == "True"
    assert n0.status.addresses[0].address == "127.1.0.1"
    assert n0.status.images[0].names[0] == "docker.io/library/present:1"
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac:
        coord = client.CoordinationV1Api(ac)
        first = coord.read_namespaced_lease("node-0", "kube-node-lease").spec.renew_time
        wait_until(
            lambda: (
                coord.read_namespaced_lease("node-0", "kube-node-lease").spec.renew_time != first
            ),
            timeout_s=5,
        )


def test_bound_pod_runs_and_deletes(sim: tuple[EmbeddedCluster, client.CoreV1Api]) -> None:
    _, v1 = sim
    v1.create_namespaced_pod("t", pod("a"))
    # Unbound, no kubelet touches it. Witnesses created after it, one bound to each node:
    # once both run, each kubelet has handled what it was sent after "a" was created.
    for node in ("node-0", "node-1"):
        v1.create_namespaced_pod("t", pod(f"witness-{node}", cpu="10m"))
        bind(v1, f"witness-{node}", node)
    for node in ("node-0", "node-1"):
        wait_until(lambda node=node: phase(v1, f"witness-{node}") == "Running")
    assert phase(v1, "a") == "Pending"
    assert v1.read_namespaced_pod("a", "t").status.container_statuses is None
    bind(v1, "a", "node-1")
    wait_until(lambda: phase(v1, "a") == "Running")
    p = v1.read_namespaced_pod("a", "t")
    assert p.status.pod_ip.startswith("127.1.1.")  # node index 1's loopback /24
    assert p.status.host_ip == "127.1.1.1"
    conds = {c.type: c.status for c in p.status.conditions}
    assert conds == {
        "PodScheduled": "True", "PodReadyToStartContainers": "True", "Initialized": "True",
        "Ready": "True", "ContainersReady": "True",
    }  # fmt: skip
    assert p.status.container_statuses[0].state.running.started_at
    v1.delete_namespaced_pod("a", "t")  # graceful: the kubelet stops it, then removes it
    wait_until(lambda: not v1.list_namespaced_pod("t", field_selector="metadata.name=a").items)


def test_admission_rejects_like_the_kubelet(sim: tuple[EmbeddedCluster, client.CoreV1Api]) -> None:
    _, v1 = sim
    for name in ("big1", "big2"):
        v1.create_namespaced_pod("t", pod(name, cpu="600m"))
        bind(v1, name, "node-0")
    wait_until(lambda: phase(v1, "big2") == "Failed")
    failed = v1.read_namespaced_pod("big2", "t").status
    assert failed.reason == "OutOfcpu"
    assert failed.message == (
        "Pod was rejected: Node didn't have enough resource: cpu, "
        "requested: 600, used: 600, capacity: 1000"
    )
    wait_until(lambda: phase(v1, "big1") == "Running")
    for name in ("s1", "s2", "s3"):
        v1.create_namespaced_pod("t", pod(name, cpu="10m"))
        bind(v1, name, "node-0")
    wait_until(lambda: phase(v1, "s3") == "Failed")
    assert v1.read_namespaced_pod("s3", "t").status.reason == "OutOfpods"
    picky = pod("picky", cpu="10m")
    picky["spec"]["nodeSelector"] = {"disk": "ssd"}  # node-1 has no such label
    v1.create_namespaced_pod("t", picky)
    bind(v1, "picky", "node-1")
    wait_until(lambda: phase(v1, "picky") == "Failed")
    assert v1.read_namespaced_pod("picky", "t").status.reason == "NodeAffinity"


def test_image_pull_and_creation_rate(sim: tuple[EmbeddedCluster, client.CoreV1Api]) -> None:
    cluster, v1 = sim
    t0 = time.monotonic()
    v1.create_namespaced_pod("t", pod("pull", image="absent:2"))
    bind(v1, "pull", "node-1")
    wait_until(lambda: phase(v1, "pull") == "Running")
    assert time.monotonic() - t0 >= 0.3  # pull latency
    images = wait_until(
        lambda: [
            i.names[0] for i in v1.read_node("node-1").status.images if "absent" in i.names[0]
        ],
        timeout_s=5,
    )
    assert images == ["docker.io/library/absent:2"]
    # 3 pods (maxPods) with a 5/s creation rate after a burst of 1: >= 0.4 s to start all
    v1.delete_namespaced_pod("pull", "t", grace_period_seconds=0)
    wait_until(lambda: not v1.list_namespaced_pod("t").items)
    t0 = time.monotonic()
    for i in range(3):
        v1.create_namespaced_pod("t", pod(f"r{i}", cpu="10m"))
        bind(v1, f"r{i}", "node-1")
    wait_until(lambda: all(phase(v1, f"r{i}") == "Running" for i in range(3)))
    assert time.monotonic() - t0 >= 0.35
    assert cluster.server is not None
    metrics = cluster.server.metrics.render().decode()
    assert "simcluster_kubelet_pod_starts_total 4.0" in metrics
    assert "simcluster_kubelet_image_pulls_total 1.0" in metrics
    assert "simcluster_kubelet_pod_start_seconds_bucket" in metrics


def test_an_image_that_does_not_exist_fails_to_pull(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    _, v1 = sim
    v1.create_namespaced_pod("t", pod("ghost", image="registry.invalid/nothing:1", cpu="10m"))
    bind(v1, "ghost", "node-1")

    def waiting() -> object:
        statuses = v1.read_namespaced_pod("ghost", "t").status.container_statuses or []
        return statuses and statuses[0].state.waiting

    state = wait_until(waiting)
    assert state.reason == "ErrImagePull" and "not found" in state.message
    assert phase(v1, "ghost") == "Pending"  # as in Kubernetes: not Failed, never Running
    v1.delete_namespaced_pod("ghost", "t", grace_period_seconds=0)


def test_node_faults(sim: tuple[EmbeddedCluster, client.CoreV1Api]) -> None:
    cluster, v1 = sim
    assert cluster.server is not None
    assert cluster.server.certs is not None
    token = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]["token"]
    http = httpx.Client(
        base_url=cluster.server.url,
        headers={"Authorization": f"Bearer {token}"},
        verify=cluster.server.certs.client_context(),
    )
    with http:
        v1.create_namespaced_pod("t", pod("victim"))
        bind(v1, "victim", "node-0")
        wait_until(lambda: phase(v1, "victim") == "Running")
        assert (
            http.post(
                "/admin/faults", json={"kind": "evict", "namespace": "t", "name": "victim"}
            ).status_code
            == 200
        )
        st = wait_until(
            lambda: (s := v1.read_namespaced_pod("victim", "t").status).phase == "Failed" and s
        )
        assert st.reason == "Evicted"
        # the Eviction API (policy/v1) deletes gracefully; the kubelet then removes the pod
        v1.create_namespaced_pod("t", pod("api-evicted"))
        bind(v1, "api-evicted", "node-0")
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "api-evicted"},
        }
        v1.create_namespaced_pod_eviction(
            "api-evicted", "t", eviction, _preload_content=False
        ).release_conn()
        wait_until(
            lambda: (
                not v1.list_namespaced_pod("t", field_selector="metadata.name=api-evicted").items
            )
        )
        http.post("/admin/faults", json={"kind": "node-not-ready", "node": "node-1"})
        n1 = v1.read_node("node-1")
        assert {c.type: c.status for c in n1.status.conditions}["Ready"] == "Unknown"
        assert n1.spec.taints[0].key == "node.kubernetes.io/unreachable"
        v1.create_namespaced_pod("t", pod("lost"))
        bind(v1, "lost", "node-1")
        wait_until(lambda: phase(v1, "lost") == "Running")
        r = http.post("/admin/faults", json={"kind": "node-delete", "node": "node-1"})
        assert r.json()["pods_lost"] == 1
        assert [n.metadata.name for n in v1.list_node().items] == ["node-0"]
        assert not v1.list_namespaced_pod("t", field_selector="metadata.name=lost").items
        missing = http.post("/admin/faults", json={"kind": "kubelet-pause", "node": "node-9"})
        assert missing.status_code == 404


def test_kubelets_survive_dropped_and_expired_watches(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    cluster, v1 = sim
    assert cluster.server is not None
    assert cluster.server.certs is not None
    token = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]["token"]
    with httpx.Client(
        base_url=cluster.server.url,
        headers={"Authorization": f"Bearer {token}"},
        verify=cluster.server.certs.client_context(),
    ) as http:
        for i, kind in enumerate(("drop-watches", "expire-watches")):
            assert http.post("/admin/faults", json={"kind": kind}).status_code == 200
            name = f"after-{i}"
            v1.create_namespaced_pod("t", pod(name))
            bind(v1, name, f"node-{i}")
            wait_until(lambda name=name: phase(v1, name) == "Running")


def _kubelet_lists(cluster: EmbeddedCluster) -> float:
    assert cluster.server is not None
    total = 0.0
    for line in cluster.server.metrics.render().decode().splitlines():
        wanted = ("apiserver_request_total{", 'verb="list"', 'user="system:node:', 'pods"')
        if all(part in line for part in wanted):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_dropped_watch_is_resumed_not_relisted(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    # Relisting at every stream end made 400 kubelets scan every pod each time the server
    # dropped its watches: the fault benchmark's bursts stalled for seconds at each drop.
    cluster, v1 = sim
    assert cluster.server is not None
    lists = _kubelet_lists(cluster)
    for round_ in range(3):
        for w in cluster.server.store.all_watchers():
            w.close()
        name = f"after-drop-{round_}"
        v1.create_namespaced_pod("t", pod(name, cpu="10m"))
        bind(v1, name, "node-0")
        wait_until(lambda n=name: phase(v1, n) == "Running", timeout_s=10, interval_s=0.05)
    assert _kubelet_lists(cluster) == lists  # resumed from its resourceVersion each time
