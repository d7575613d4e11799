"""Property tests: invariants of the model, the ledger and the planner on random clusters."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import Resources, Scheduler, SchedulerSettings
from scheduler.filters import Capacity
from scheduler.fit import capacity_left, check_capacity, check_node
from scheduler.messages import reason_histogram, unschedulable_message
from scheduler.table import node_limit
from tests.support.pods import node_json, pod_json

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CPUS = ["100m", "250m", "500m", "1", "1500m", "2"]
MEMS = ["64Mi", "512Mi", "1Gi", "3Gi"]
TAINTS = [
    {"key": "gpu", "value": "yes", "effect": "NoSchedule"},
    {"key": "evict", "value": "", "effect": "NoExecute"},
    {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
]
IMAGES = ["registry.local/a:1", "registry.local/b:1", "registry.local/c:1"]
TOLERATIONS = [{"key": "gpu", "operator": "Exists"}, {"operator": "Exists"}]


@st.composite
def nodes(draw: Any) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 7))):
        out.append(
            node_json(
                f"n{i}",
                cpu=draw(st.sampled_from(["1", "2", "4", "3500m"])),
                memory=draw(st.sampled_from(["2Gi", "4Gi", "8Gi"])),
                pods=str(draw(st.integers(1, 12))),
                labels={"zone": draw(st.sampled_from(["a", "b"]))},
                taints=draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=str)),
                unschedulable=draw(st.booleans()) and draw(st.booleans()),
                conditions={"Ready": draw(st.sampled_from(["True", "True", "True", "False"]))},
                images=draw(st.lists(st.sampled_from(IMAGES), max_size=2, unique=True)),
            )
        )
    return out


@st.composite
def pending(draw: Any) -> list[dict[str, Any]]:
    pods = []
    for c in range(draw(st.integers(1, 4))):
        kw: dict[str, Any] = {
            "cpu": draw(st.sampled_from(CPUS)),
            "memory": draw(st.sampled_from(MEMS)),
        }
        if draw(st.booleans()):
            kw["tolerations"] = [draw(st.sampled_from(TOLERATIONS))]
        if draw(st.integers(0, 3)) == 0:
            kw["node_selector"] = {"zone": draw(st.sampled_from(["a", "b"]))}
        for i in range(draw(st.integers(1, 25))):
            # Several images per class of requests: exercises groups and per-image heaps.
            pods.append(pod_json(f"c{c}-{i}", image=draw(st.sampled_from(IMAGES)), **kw))
    return pods


def build(
    node_objs: list[dict[str, Any]], foreign: list[tuple[int, str, str, str]], cap: int | None
) -> Scheduler:
    s = Scheduler(SchedulerSettings(max_starting_per_node=cap))
    for obj in node_objs:
        s.upsert_node(obj)
    for k, (i, cpu, mem, phase) in enumerate(foreign):
        node = node_objs[i % len(node_objs)]["metadata"]["name"]
        s.upsert_pod(pod_json(f"foreign{k}", cpu, mem, node=node, phase=phase))
    return s


foreign_pods = st.lists(
    st.tuples(
        st.integers(0, 6),
        st.sampled_from(CPUS),
        st.sampled_from(MEMS),
        st.sampled_from(["Running", "Pending", "Succeeded"]),
    ),
    max_size=12,
)


def free_of(s: Scheduler, name: str, extra: Resources, extra_pods: int) -> Capacity:
    free = s.free(name)
    return Capacity(
        free.cpu - extra.cpu, free.memory - extra.memory, free.storage, free.pods - extra_pods
    )


@PROPS
@given(nodes(), foreign_pods, pending(), st.sampled_from([None, 1, 3, 20]))
def test_plans_respect_capacity_filters_and_explain_failures(
    node_objs: list[dict[str, Any]],
    foreign: list[tuple[int, str, str, str]],
    batch: list[dict[str, Any]],
    cap: int | None,
) -> None:
    s = build(node_objs, foreign, cap)
    before = {name: s.free(name) for name in s.model.nodes}
    plan = s.plan(batch, now=0.0)
    pods = {p.uid: p for p in (s.model.decoder.pod(obj) for obj in batch)}
    assert len(plan.assignments) + len(plan.unschedulable) == len(batch)

    # Replay every assignment in order from the state before the plan: each passes every
    # filter against what was free at that moment, so actual + assumed never exceed limits.
    taken: dict[str, tuple[Resources, int]] = {n: (Resources(), 0) for n in before}
    for a in plan.assignments:
        shape = pods[a.uid].shape
        used, count = taken[a.node]
        f = before[a.node]
        free = Capacity(f.cpu - used.cpu, f.memory - used.memory, f.storage, f.pods - count)
        assert check_node(shape, s.model.nodes[a.node]).ok
        assert check_capacity(shape, free).ok, (a, free)
        taken[a.node] = (used + shape.requests, count + 1)
    for name in s.model.nodes:
        assert s.free(name).pods >= 0 or before[name].pods < 0
        if taken[name][1]:
            after = s.free(name)
            assert min(after.cpu, after.memory, after.pods) >= 0

    # Every unschedulable pod really fits nowhere now, and its message counts each node's
    # first failing filter, in kube-scheduler's format.
    for u in plan.unschedulable:
        shape = pods[u.uid].shape
        statuses = []
        for name, node in s.model.nodes.items():
            status = check_node(shape, node)
            if status.ok:
                status = check_capacity(shape, s.free(name))
            assert not status.ok
            statuses.append(status)
        histogram = reason_histogram(statuses)
        assert dict(u.reasons) == histogram
        assert u.message == unschedulable_message(len(s.model.nodes), histogram)


@PROPS
@given(nodes(), foreign_pods, pending(), st.sampled_from([None, 2]))
def test_reserve_then_unreserve_leaves_the_model_unchanged(
    node_objs: list[dict[str, Any]],
    foreign: list[tuple[int, str, str, str]],
    batch: list[dict[str, Any]],
    cap: int | None,
) -> None:
    s = build(node_objs, foreign, cap)
    before = s.model.snapshot()
    plan = s.plan(batch, now=0.0)
    half = len(plan.assignments) // 2
    for a in plan.assignments[:half]:
        assert s.forget(a.uid)
        assert not s.forget(a.uid)  # idempotent
    assert sorted(s.expire(1e9)) == sorted(a.uid for a in plan.assignments[half:])
    assert s.model.snapshot() == before
    assert len(s.model.ledger) == 0


EVENTS = st.lists(
    st.tuples(
        st.integers(0, 5),  # pod id
        st.sampled_from(["upsert", "delete"]),
        st.sampled_from([None, "n0", "n1"]),
        st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
        st.booleans(),  # deleting
        st.sampled_from(CPUS),
    ),
    max_size=40,
)


@PROPS
@given(EVENTS)
def test_incremental_usage_equals_a_recount(events: list[tuple[Any, ...]]) -> None:
    s = Scheduler()
    s.upsert_node(node_json("n0"))
    s.upsert_node(node_json("n1"))
    final: dict[str, dict[str, Any]] = {}
    for pod_id, op, node, phase, deleting, cpu in events:
        obj = pod_json(f"p{pod_id}", cpu, "1Mi", node=node, phase=phase, deleting=deleting)
        if op == "delete":
            s.delete_pod(obj)
            final.pop(f"p{pod_id}", None)
        else:
            s.upsert_pod(obj)
            final[f"p{pod_id}"] = obj
    fresh = Scheduler()
    fresh.upsert_node(node_json("n0"))
    fresh.upsert_node(node_json("n1"))
    for obj in final.values():
        fresh.upsert_pod(obj)
    assert s.model.snapshot() == fresh.model.snapshot()


@PROPS
@given(
    st.integers(1, 20),  # nodes
    st.integers(1, 16),  # pod cpu in units of 125m
    st.integers(0, 400),  # pods
    st.sampled_from([(4, 8), (16, 110)]),  # node cores, max pods
)
def test_identical_pods_on_identical_nodes_use_the_minimum(
    n_nodes: int, size: int, n_pods: int, node_shape: tuple[int, int]
) -> None:
    cores, max_pods = node_shape
    s = Scheduler(SchedulerSettings(max_starting_per_node=None))
    for i in range(n_nodes):
        s.upsert_node(node_json(f"n{i}", str(cores), "1Ti", str(max_pods)))
    batch = [pod_json(f"p{i}", f"{125 * size}m", None) for i in range(n_pods)]
    plan = s.plan(batch, now=0.0)
    per_node = min(cores * 1000 // (125 * size), max_pods)
    placed = min(n_pods, per_node * n_nodes)
    assert len(plan.assignments) == placed
    assert plan.nodes_used == math.ceil(placed / per_node)


def optimal_bins(sizes: list[int], capacity: int) -> int:
    """Exact bin packing by dynamic programming over subsets (fine for <= 10 items)."""
    n = len(sizes)
    best: list[tuple[int, int]] = [(0, 0)] + [(n + 1, 0)] * ((1 << n) - 1)
    for mask in range(1, 1 << n):
        for i in range(n):
            if mask & (1 << i):
                bins, fill = best[mask ^ (1 << i)]
                if fill + sizes[i] <= capacity:
                    option = (bins, fill + sizes[i])
                else:
                    option = (bins + 1, sizes[i])
                if bins == 0:
                    option = (1, sizes[i])
                best[mask] = min(best[mask], option)
    return best[-1][0]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=10))
def test_mixed_sizes_stay_within_11_9_of_optimal(units: list[int]) -> None:
    """Single resource (CPU), identical empty nodes of 20 units: FFD's bound holds."""
    s = Scheduler(SchedulerSettings(max_starting_per_node=None))
    for i in range(len(units)):
        s.upsert_node(node_json(f"n{i:02d}", "2500m", "1Ti", "110"))
    batch = [pod_json(f"p{i}", f"{125 * u}m", None) for i, u in enumerate(units)]
    plan = s.plan(batch, now=0.0)
    assert len(plan.assignments) == len(units)
    opt = optimal_bins(units, 20)
    assert plan.nodes_used <= 11 / 9 * opt + 1
    assert plan.nodes_used >= opt


def test_optimal_bins_oracle() -> None:
    assert optimal_bins([10, 10, 10], 20) == 2
    assert optimal_bins([11, 11, 11], 20) == 3
    assert optimal_bins([6, 7, 7, 14, 13, 13], 20) == 3
    assert optimal_bins([20], 20) == 1


@PROPS
@given(st.integers(1, 30), st.integers(1, 8), st.integers(0, 300))
def test_burst_never_exceeds_the_cap_while_capacity_allows(
    n_nodes: int, cap: int, n_pods: int
) -> None:
    s = Scheduler(SchedulerSettings(max_starting_per_node=cap))
    for i in range(n_nodes):
        s.upsert_node(node_json(f"n{i}"))
    plan = s.plan([pod_json(f"p{i}") for i in range(n_pods)], now=0.0)
    counts = Counter(a.node for a in plan.assignments)
    if n_pods <= n_nodes * cap:
        assert max(counts.values(), default=0) <= cap
        assert len(counts) == math.ceil(n_pods / cap)  # spread just enough, packed within
    else:
        assert max(counts.values()) - min(counts.values()) <= 1
        assert len(counts) == n_nodes


def test_node_limit_matches_free_for_an_empty_node() -> None:
    s = Scheduler()
    s.upsert_node(node_json("n", "3", "1Gi", "7"))
    limit = node_limit(s.model.nodes["n"], s.settings)
    assert capacity_left(limit, s.model.usage["n"]) == s.free("n")
