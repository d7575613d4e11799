"""Batch planning: burst spreading vs steady-state packing, classes, determinism, reasons."""

from __future__ import annotations

from collections import Counter

import pytest

from scheduler import Plan, Scheduler, SchedulerSettings
from tests.support.pods import node_json, pod_json


def cluster(n: int, settings: SchedulerSettings | None = None, **node_kw: object) -> Scheduler:
    s = Scheduler(settings)
    for i in range(n):
        s.upsert_node(node_json(f"n{i:03d}", **node_kw))  # type: ignore[arg-type]
    return s


def sandboxes(n: int, prefix: str = "p", **kw: object) -> list[dict[str, object]]:
    return [pod_json(f"{prefix}{i}", **kw) for i in range(n)]  # type: ignore[arg-type]


def test_steady_state_packs_onto_one_node() -> None:
    s = cluster(10, SchedulerSettings(max_starting_per_node=20))  # 15 < cap: no burst
    plan = s.plan(sandboxes(15), now=0.0)
    assert plan.by_node() == {plan.assignments[0].node: 15}
    assert plan.classes == 1


def test_a_burst_is_spread_so_no_start_queue_exceeds_the_cap() -> None:
    s = cluster(10, SchedulerSettings(max_starting_per_node=20))
    plan = s.plan(sandboxes(100), now=0.0)
    counts = plan.by_node()
    assert len(plan.assignments) == 100
    assert max(counts.values()) <= 20
    assert len(counts) == 5  # just enough nodes: still packed within the cap


def test_beyond_every_cap_the_queues_are_levelled() -> None:
    s = cluster(10, SchedulerSettings(max_starting_per_node=5))
    plan = s.plan(sandboxes(73), now=0.0)
    counts = sorted(plan.by_node().values())
    assert sum(counts) == 73
    assert counts[-1] - counts[0] <= 1  # 7 or 8 starting on every node
    assert len(counts) == 10


def test_start_queue_counts_foreign_and_earlier_pods() -> None:
    s = cluster(2, SchedulerSettings(max_starting_per_node=4))
    for i in range(4):  # n000 already has a full start queue
        s.upsert_pod(pod_json(f"f{i}", "10m", "1Mi", node="n000", phase="Pending"))
    plan = s.plan(sandboxes(3), now=0.0)
    assert plan.by_node() == {"n001": 3}
    # Those pods start running: n000's queue drains and packing may use it again.
    for i in range(4):
        s.upsert_pod(pod_json(f"f{i}", "10m", "1Mi", node="n000", phase="Running"))
    plan = s.plan(sandboxes(1, prefix="q"), now=0.0)
    assert plan.by_node() == {"n001": 1}  # n001 is fuller (3 sandboxes), queue 3 < 4


def test_defer_over_cap_holds_the_rest_back() -> None:
    s = cluster(3, SchedulerSettings(max_starting_per_node=2, defer_over_cap=True))
    plan = s.plan(sandboxes(10), now=0.0)
    assert len(plan.assignments) == 6
    assert len(plan.deferred) == 4
    assert plan.unschedulable == ()


def test_the_same_input_gives_the_same_plan_and_seeds_break_ties() -> None:
    def run(seed: int) -> Plan:
        s = cluster(50, SchedulerSettings(seed=seed))
        return s.plan(sandboxes(30), now=0.0)

    assert run(1) == run(1)
    firsts = {run(seed).assignments[0].node for seed in range(8)}
    assert len(firsts) > 1  # equal nodes: the seed picks among them


def test_already_bound_reserved_or_duplicate_pods_are_skipped() -> None:
    s = cluster(2)
    first = s.plan([pod_json("a")], now=0.0)
    assert len(first.assignments) == 1
    plan = s.plan(
        [pod_json("a"), pod_json("b"), pod_json("b"), pod_json("c", node="n000")], now=0.0
    )
    assert [a.uid for a in plan.assignments] == ["b"]
    assert sorted(plan.skipped) == ["a", "b", "c"]


def test_reservations_are_seen_by_the_next_plan() -> None:
    s = cluster(1, pods="3")
    assert len(s.plan(sandboxes(2), now=0.0).assignments) == 2
    second = s.plan(sandboxes(2, prefix="q"), now=0.0)
    assert len(second.assignments) == 1
    assert second.unschedulable[0].message == "0/1 nodes are available: 1 Too many pods."
    # The bind of one reservation failed: forgetting it frees the slot.
    assert s.forget("p0")
    assert len(s.plan(sandboxes(1, prefix="r"), now=0.0).assignments) == 1


def test_expired_reservations_free_capacity() -> None:
    s = cluster(1, SchedulerSettings(bind_timeout_s=5.0), pods="1")
    s.plan([pod_json("a")], now=100.0)
    assert s.expire(104.0) == []
    assert s.expire(105.0) == ["a"]
    assert len(s.plan([pod_json("b")], now=106.0).assignments) == 1


def test_finish_binding_starts_the_assumed_ttl() -> None:
    s = cluster(1, SchedulerSettings(bind_timeout_s=300.0, assume_ttl_s=30.0), pods="3")
    s.plan([pod_json("a"), pod_json("b"), pod_json("c")], now=0.0)
    # Binds of a and b succeeded at t=10; c's bind is still in flight.
    assert s.finish_binding(["a", "b", "unknown"], now=10.0) == 2
    assert s.expire(39.0) == []
    assert sorted(s.expire(40.0)) == ["a", "b"]  # the watch never confirmed them
    assert s.expire(299.0) == []
    assert s.expire(300.0) == ["c"]
    assert s.usage("n000").pods == 0


def test_dry_run_leaves_the_model_unchanged() -> None:
    s = cluster(3)
    before = s.model.snapshot()
    plan = s.plan(sandboxes(50), now=0.0, reserve=False)
    assert len(plan.assignments) == 50
    assert s.model.snapshot() == before
    assert len(s.model.ledger) == 0


def test_bigger_and_higher_priority_classes_go_first() -> None:
    s = cluster(1, SchedulerSettings(max_starting_per_node=None), cpu="2")
    small = sandboxes(4, prefix="s", cpu="500m", memory="1Mi")
    big = sandboxes(1, prefix="b", cpu="2", memory="1Mi")
    plan = s.plan(small + big, now=0.0, reserve=False)
    assert [a.uid for a in plan.assignments] == ["b0"]
    assert plan.classes == 2
    urgent = sandboxes(1, prefix="u", cpu="500m", memory="1Mi", priority=1000)
    plan = s.plan(big + urgent, now=0.0, reserve=False)
    assert [a.uid for a in plan.assignments] == ["u0"]
    assert [u.uid for u in plan.unschedulable] == ["b0"]


def test_classes_differ_by_constraints_not_only_requests() -> None:
    s = cluster(2, labels={"pool": "sandbox"})
    s.upsert_node(node_json("other"))
    plan = s.plan(
        sandboxes(2, prefix="a") + sandboxes(2, prefix="b", node_selector={"pool": "sandbox"}),
        now=0.0,
    )
    assert plan.classes == 2
    assert {a.node for a in plan.assignments if a.uid.startswith("b")} <= {"n000", "n001"}


def test_unschedulable_pods_get_kube_style_reasons() -> None:
    s = cluster(3, cpu="1")
    s.upsert_node(
        node_json("tainted", taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])
    )
    s.upsert_node(node_json("cordoned", unschedulable=True))
    s.upsert_node(node_json("sick", conditions={"Ready": "False"}))
    plan = s.plan(sandboxes(20, cpu="600m"), now=0.0)
    # 3 small nodes take one 600m pod each; the other three nodes are excluded.
    assert len(plan.assignments) == 3
    assert len(plan.unschedulable) == 17
    assert plan.unschedulable[0].message == (
        "0/6 nodes are available: 1 node(s) had untolerated taint {gpu: yes}, "
        "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) were unschedulable, 3 Insufficient cpu."
    )
    assert dict(plan.unschedulable[0].reasons)["Insufficient cpu"] == 3


def test_no_nodes_at_all() -> None:
    plan = Scheduler().plan(sandboxes(1), now=0.0)
    assert plan.unschedulable[0].message == "no nodes available to schedule pods"


def test_node_set_changes_are_picked_up_between_plans() -> None:
    s = cluster(1, pods="1")
    assert len(s.plan([pod_json("a")], now=0.0).assignments) == 1
    s.upsert_node(node_json("n999", pods="1"))
    assert s.plan([pod_json("b")], now=0.0).assignments[0].node == "n999"
    s.delete_node("n999")
    s.upsert_node(node_json("n000", pods="5"))  # updated node object
    assert s.plan([pod_json("c")], now=0.0).assignments[0].node == "n000"
    assert s.free("n000").pods == 3
    assert s.usage("n000").assumed == 2


def test_extra_node_filter_plugins_run_after_the_built_in_ones() -> None:
    from scheduler import Code, NodeInfo, PodShape, Status

    def zone_b_only(shape: PodShape, node: NodeInfo) -> Status:
        if node.labels.get("zone") == "b":
            return Status()
        return Status(Code.UNRESOLVABLE, ("node(s) are outside zone b",))

    s = Scheduler(SchedulerSettings(extra_node_filters=(zone_b_only,)))
    s.upsert_node(node_json("a1", labels={"zone": "a"}))
    s.upsert_node(node_json("b1", labels={"zone": "b"}, pods="2"))
    s.upsert_node(node_json("cordoned", labels={"zone": "a"}, unschedulable=True))
    plan = s.plan(sandboxes(3), now=0.0)
    assert {a.node for a in plan.assignments} == {"b1"}
    assert plan.unschedulable[0].message == (
        "0/3 nodes are available: 1 Too many pods, 1 node(s) are outside zone b, "
        "1 node(s) were unschedulable."
    )


def test_node_insertion_order_does_not_change_the_plan() -> None:
    names = [f"n{i:03d}" for i in range(40)]

    def run(order: list[str]) -> Plan:
        s = Scheduler(SchedulerSettings(seed=7, max_starting_per_node=6))
        for name in order:
            s.upsert_node(node_json(name))
        for i, name in enumerate(names[:10]):
            s.upsert_pod(pod_json(f"f{i}", f"{100 * (i + 1)}m", "1Gi", node=name, phase="Running"))
        return s.plan(sandboxes(100), now=0.0)

    assert run(names) == run(list(reversed(names))) == run(names[20:] + names[:20])


def test_extended_resources_and_storage_are_counted() -> None:
    s = cluster(2, SchedulerSettings(max_starting_per_node=None), storage="10Gi")
    s.upsert_node(node_json("gpu", storage="10Gi", extended={"nvidia.com/gpu": "2"}))
    gpu_pods = sandboxes(3, prefix="g", extra={"nvidia.com/gpu": "1"})
    disk_pods = sandboxes(7, prefix="d", extra={"ephemeral-storage": "3Gi"})
    plan = s.plan(gpu_pods + disk_pods, now=0.0)
    placed = {a.uid: a.node for a in plan.assignments}
    assert [placed.get(f"g{i}") for i in range(3)] == ["gpu", "gpu", None]
    gpu_reason = next(u for u in plan.unschedulable if u.uid == "g2").message
    assert gpu_reason == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    # 10Gi per node holds three 3Gi pods: 9 slots over 3 nodes for 7 pods.
    assert sum(1 for i in range(7) if f"d{i}" in placed) == 7
    assert max(Counter(placed[f"d{i}"] for i in range(7)).values()) <= 3
    assert s.usage("gpu").requested.extended == (("nvidia.com/gpu", 2),)


def test_decode_once_then_plan_and_stats() -> None:
    s = cluster(2)
    s.upsert_pod(pod_json("running", node="n000", phase="Running"))
    pods = [s.decode_pod(obj) for obj in sandboxes(3)]
    assert len(s.plan(pods, now=0.0).assignments) == 3
    assert s.stats() == {"nodes": 2, "pods": 1, "reserved": 3}


def test_invalid_pods_are_rejected_without_failing_the_batch() -> None:
    s = cluster(1)
    bad_quantity = pod_json("bad", cpu="lots")
    no_containers = {"metadata": {"uid": "empty"}, "spec": {"containers": [{"image": 5}]}}
    not_a_pod = {"metadata": "nope"}
    plan = s.plan([bad_quantity, pod_json("good"), no_containers, not_a_pod], now=0.0)
    assert [a.uid for a in plan.assignments] == ["good"]
    assert [uid for uid, _ in plan.rejected] == ["bad", "empty", "?"]
    assert plan.rejected[0][1] == "invalid pod: not a quantity: 'lots'"


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_levelling_prefers_nodes_holding_the_image(seed: int) -> None:
    s = Scheduler(SchedulerSettings(max_starting_per_node=1, seed=seed, pull_join_cap=None))
    s.upsert_node(node_json("a", images=["registry.local/a:1"]))
    s.upsert_node(node_json("b", images=["registry.local/b:1"]))
    batch = sandboxes(2, prefix="a", image="registry.local/a:1")
    batch += sandboxes(2, prefix="b", image="registry.local/b:1")
    placed = {a.uid: a.node for a in s.plan(batch, now=0.0).assignments}
    # a0 takes node a's start slot, a1 the free one on b; both queues are then full and
    # the b pods are levelled, one per node, and node b takes one whose image it holds.
    assert (placed["a0"], placed["a1"]) == ("a", "b")
    assert sorted([placed["b0"], placed["b1"]]) == ["a", "b"]
    assert placed["b0"] == "b"


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_pods_wait_in_a_holders_queue_rather_than_pull_elsewhere(seed: int) -> None:
    """The same batch with pull_join_cap (the default): a1 would start a pull on b, so it
    queues behind a0 on a (up to pull_join_cap starting there) instead; each node takes the
    pods of its own image and nothing is pulled."""
    s = Scheduler(SchedulerSettings(max_starting_per_node=1, seed=seed))
    s.upsert_node(node_json("a", images=["registry.local/a:1"]))
    s.upsert_node(node_json("b", images=["registry.local/b:1"]))
    batch = sandboxes(2, prefix="a", image="registry.local/a:1")
    batch += sandboxes(2, prefix="b", image="registry.local/b:1")
    placed = {a.uid: a.node for a in s.plan(batch, now=0.0).assignments}
    assert placed == {"a0": "a", "a1": "a", "b0": "b", "b1": "b"}


def test_assignments_render_the_binding_body() -> None:
    s = cluster(1)
    (a,) = s.plan([pod_json("u-1")], now=0.0).assignments
    assert a.binding() == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "pod-u-1", "namespace": "sandboxes", "uid": "u-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n000"},
    }
