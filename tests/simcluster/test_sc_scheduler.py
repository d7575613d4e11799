"""simcluster's default scheduler (simcluster/scheduler/) seen through real clients: pods of
``default-scheduler`` are bound through ``pods/binding`` and run; cordon, taints,
tolerations, node selectors and resources decide where; a pod that fits nowhere stays Pending
with upstream's Unschedulable condition and FailedScheduling event, and binds once a node
frees up; Sandman's pods are never touched; the profile switch turns it off; an operator's
``kubectl run`` becomes Running."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings
from simcluster.profile import load_profile
from simcluster.scheduler import SchedulerSettings
from tests.support.kubectl import Kubectl, admin_http
from tests.support.wait import wait_until

NODE = NodeSettings(cpu="2", memory="4Gi", max_pods=10, start_latency_s=0.02, lease_interval_s=1)
#: Short back-offs: a retry after a cluster change comes within a test's patience.
HOSTNAME = "kubernetes.io/hostname"
SCHEDULER = "system:kube-scheduler"
FAST = SchedulerSettings(enabled=True, backoff_initial_s=0.05, backoff_max_s=0.2)


@pytest.fixture
def sim() -> Iterator[tuple[EmbeddedCluster, client.CoreV1Api]]:
    settings = ClusterSettings(nodes=3, node=NODE, scheduler=FAST)
    with (
        EmbeddedCluster(settings) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        yield cluster, v1


def pod(name: str, cpu: str = "100m", scheduler: str | None = None, **spec: Any) -> dict:
    body: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "c", "image": "img:1", "resources": {"requests": {"cpu": cpu}}}
            ],
            **spec,
        },
    }
    if scheduler is not None:
        body["spec"]["schedulerName"] = scheduler
    return body


def running_on(v1: client.CoreV1Api, name: str) -> str | None:
    p = v1.read_namespaced_pod(name, "t")
    return p.spec.node_name if p.status.phase == "Running" else None


def scheduled(v1: client.CoreV1Api, name: str) -> client.V1PodCondition | None:
    conditions = v1.read_namespaced_pod(name, "t").status.conditions or []
    return next((c for c in conditions if c.type == "PodScheduled"), None)


def events(v1: client.CoreV1Api, name: str) -> list[client.CoreV1Event]:
    selector = f"involvedObject.name={name}"
    return list(v1.list_namespaced_event("t", field_selector=selector).items)


def cordon(v1: client.CoreV1Api, node: str, on: bool = True) -> None:
    v1.patch_node(node, {"spec": {"unschedulable": on}})


def taint(v1: client.CoreV1Api, node: str, *taints: dict[str, str]) -> None:
    v1.patch_node(node, {"spec": {"taints": list(taints)}})


def test_binds_default_pods_and_leaves_sandmans_alone(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    cluster, v1 = sim
    v1.create_namespaced_pod("t", pod("ours-by-default"))  # no schedulerName: defaulted
    v1.create_namespaced_pod("t", pod("ours-by-name", scheduler="default-scheduler"))
    v1.create_namespaced_pod("t", pod("sandmans", scheduler="sandman"))
    for name in ("ours-by-default", "ours-by-name"):
        node = wait_until(lambda name=name: running_on(v1, name), what=f"{name} Running")
        assert node in {"node-0", "node-1", "node-2"}
        condition = scheduled(v1, name)
        assert condition is not None and condition.status == "True"
        (event,) = events(v1, name)
        assert (event.reason, event.type, event.source.component) == (
            "Scheduled",
            "Normal",
            "default-scheduler",
        )
        assert event.message == f"Successfully assigned t/{name} to {node}"
    # Both were scheduled after the Sandman pod was created: it was seen and left alone.
    sandmans = v1.read_namespaced_pod("sandmans", "t")
    assert sandmans.spec.node_name is None and sandmans.status.phase == "Pending"
    assert scheduled(v1, "sandmans") is None and events(v1, "sandmans") == []
    assert cluster.cluster is not None and cluster.cluster.scheduler is not None
    assert cluster.cluster.scheduler.bound == 2
    # Least allocated: the second pod went to another node than the first.
    assert running_on(v1, "ours-by-default") != running_on(v1, "ours-by-name")


def test_cordon_taints_and_node_selector_decide_where(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    _, v1 = sim
    cordon(v1, "node-0")
    taint(v1, "node-1", {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})
    for i in range(3):  # neither cordoned node-0 nor tainted node-1
        v1.create_namespaced_pod("t", pod(f"plain-{i}"))
    for i in range(3):
        assert wait_until(lambda i=i: running_on(v1, f"plain-{i}")) == "node-2"
    tolerant = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    # node-2 holds 300m already: least allocated sends a tolerating pod to node-1
    v1.create_namespaced_pod("t", pod("tolerant", tolerations=[tolerant]))
    assert wait_until(lambda: running_on(v1, "tolerant")) == "node-1"
    cordon(v1, "node-0", on=False)
    # (the simulated kubelet admits by the labels it registered: select by one of those)
    v1.create_namespaced_pod("t", pod("picky", nodeSelector={HOSTNAME: "node-0"}))
    assert wait_until(lambda: running_on(v1, "picky")) == "node-0"
    not_node_0 = {"key": HOSTNAME, "operator": "NotIn", "values": ["node-0"]}
    required = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [not_node_0]}]
            }
        }
    }
    # node-0 is the least allocated now, but the affinity rules it out
    v1.create_namespaced_pod("t", pod("affine", tolerations=[tolerant], affinity=required))
    assert wait_until(lambda: running_on(v1, "affine")) == "node-1"


def test_a_pod_that_fits_nowhere_is_unschedulable_until_a_node_frees_up(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    _, v1 = sim
    cordon(v1, "node-0")
    taint(v1, "node-1", {"key": "dedicated", "value": "gpu", "effect": "NoExecute"})
    v1.create_namespaced_pod("t", pod("hog", cpu="1500m"))
    assert wait_until(lambda: running_on(v1, "hog")) == "node-2"
    v1.create_namespaced_pod("t", pod("big", cpu="1"))
    expected = (
        "0/3 nodes are available: 1 Insufficient cpu, "
        "1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were unschedulable."
    )

    def unschedulable() -> client.V1PodCondition:
        condition = scheduled(v1, "big")
        assert condition is not None and condition.status == "False"
        return condition

    condition = wait_until(unschedulable)
    assert (condition.reason, condition.message) == ("Unschedulable", expected)
    failed = wait_until(lambda: events(v1, "big"))
    assert [(e.reason, e.type, e.message) for e in failed] == [
        ("FailedScheduling", "Warning", expected)
    ]
    big = v1.read_namespaced_pod("big", "t")
    assert big.status.phase == "Pending" and big.spec.node_name is None
    v1.delete_namespaced_pod("hog", "t", grace_period_seconds=0)
    assert wait_until(lambda: running_on(v1, "big")) == "node-2"
    assert scheduled(v1, "big").status == "True"  # type: ignore[union-attr]


def test_too_many_pods_and_memory_are_reasons_too(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    _, v1 = sim
    huge = pod("huge", cpu="10m")
    huge["spec"]["containers"][0]["resources"]["requests"]["memory"] = "5Gi"
    v1.create_namespaced_pod("t", huge)
    message = wait_until(lambda: (scheduled(v1, "huge") or client.V1PodCondition("", "")).message)
    assert message == "0/3 nodes are available: 3 Insufficient memory."


def test_a_failed_bind_is_retried_after_its_backoff(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    """The scheduler's writes fail (injected 500s for its user only): the pod is tried again
    after its back-off, without any change in the cluster, and binds once writes succeed."""
    cluster, v1 = sim
    with admin_http(cluster.kubeconfig) as http:
        fault = {"kind": "api-errors", "verb": "create", "rate": 1.0, "code": 500}
        assert http.post("/admin/faults", json={**fault, "user": SCHEDULER}).status_code == 200
        v1.create_namespaced_pod("t", pod("unlucky"))

        def failed_binds() -> int:
            text = http.get("/metrics").text
            return sum(
                1
                for line in text.splitlines()
                if line.startswith("apiserver_request_total{")
                and f'user="{SCHEDULER}"' in line
                and 'subresource="binding"' in line
                and 'code="500"' in line
            )

        wait_until(failed_binds, what="the scheduler's bind to fail")
        assert v1.read_namespaced_pod("unlucky", "t").spec.node_name is None
        assert http.post("/admin/faults", json={"kind": "clear"}).status_code == 200
    assert wait_until(lambda: running_on(v1, "unlucky")) in {"node-0", "node-1", "node-2"}


def test_a_gated_pod_waits_for_its_gates_to_be_lifted(
    sim: tuple[EmbeddedCluster, client.CoreV1Api],
) -> None:
    _, v1 = sim
    v1.create_namespaced_pod("t", pod("gated", schedulingGates=[{"name": "example.com/quota"}]))

    def gated() -> client.V1PodCondition:
        condition = scheduled(v1, "gated")
        assert condition is not None and condition.reason == "SchedulingGated"
        return condition

    condition = wait_until(gated)
    assert condition.status == "False"
    assert condition.message == "Scheduling is blocked due to non-empty scheduling gates"
    assert events(v1, "gated") == []  # upstream records no event for a gated pod
    v1.patch_namespaced_pod("gated", "t", {"spec": {"schedulingGates": None}})
    assert wait_until(lambda: running_on(v1, "gated")) in {"node-0", "node-1", "node-2"}


def test_off_switch_leaves_default_pods_pending() -> None:
    settings = load_profile("ci", {"scheduler.enabled": "false"})
    assert not settings.scheduler.enabled and load_profile("ci").scheduler.enabled
    with (
        EmbeddedCluster(settings) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        assert cluster.cluster is not None and cluster.cluster.scheduler is None
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        v1.create_namespaced_pod("t", pod("waiting"))
        v1.create_namespaced_pod("t", pod("marker", nodeName="node-0"))
        # The marker ran after "waiting" was created: a scheduler would have bound it by now.
        wait_until(lambda: running_on(v1, "marker"))
        assert v1.read_namespaced_pod("waiting", "t").spec.node_name is None
        assert scheduled(v1, "waiting") is None and events(v1, "waiting") == []


def test_kubectl_run_becomes_running_on_the_ci_profile() -> None:
    """As an operator would: a plain ``kubectl run`` pod on the ci profile (with RBAC, so
    the scheduler's own grants are checked), cordon with ``kubectl cordon``."""
    settings = load_profile("ci", {"apiserver.authorization": "rbac"})
    with EmbeddedCluster(settings) as cluster:
        kubectl = Kubectl(cluster.kubeconfig)
        kubectl.run("cordon", "node-0")
        kubectl.run("cordon", "node-1")
        kubectl.run("run", "web", "--image=busybox:1", "--restart=Never")
        kubectl.run("wait", "--for=condition=Ready", "pod/web", "--timeout=30s")
        got = kubectl.json("get", "pod", "web")
        assert got["status"]["phase"] == "Running"
        assert got["spec"]["nodeName"] == "node-2"
        described = kubectl.run("describe", "pod", "web").stdout
        assert "Successfully assigned default/web to node-2" in described
        assert "default-scheduler" in described
