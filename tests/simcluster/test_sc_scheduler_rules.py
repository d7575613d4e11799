"""The default scheduler's pure part (simcluster/scheduler/framework.py, cache.py, queue.py):
upstream's toleration and node-affinity semantics, the FitError message, the score, and the
property the whole thing rests on — a pod is never placed where the requests bound there
would exceed the node's allocatable, however many pods are placed one after another."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcluster.scheduler.cache import node_info, pod_info
from simcluster.scheduler.framework import (
    NodeInfo,
    PodInfo,
    Status,
    decide,
    fit_error,
    run_filters,
    term_matches,
    tolerates,
)
from simcluster.scheduler.queue import SchedulingQueue
from simcluster.scheduler.settings import SchedulerSettings

NO_SCHEDULE = {"key": "k", "value": "v", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "k", "operator": "Equal", "value": "v"}, NO_SCHEDULE, True),
        ({"key": "k", "value": "v"}, NO_SCHEDULE, True),  # operator defaults to Equal
        ({"key": "k", "value": "w"}, NO_SCHEDULE, False),
        ({"key": "k", "operator": "Exists"}, NO_SCHEDULE, True),
        ({"operator": "Exists"}, NO_SCHEDULE, True),  # every taint
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, NO_SCHEDULE, False),
        ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, NO_SCHEDULE, True),
        ({"key": "other", "operator": "Exists"}, NO_SCHEDULE, False),
        ({"key": "k", "operator": "Bogus", "value": "v"}, NO_SCHEDULE, False),
    ],
)
def test_tolerations_as_upstreams_tolerates_taint(
    toleration: dict[str, str], taint: dict[str, str], expected: bool
) -> None:
    assert tolerates(toleration, taint) is expected


LABELS = {"zone": "a", "cores": "8"}


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]}, True),
        ({"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["4"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["4"]}]}, False),
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, True),
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}, False),
        ({}, False),  # an empty term matches nothing
    ],
)
def test_node_selector_terms_as_upstreams(term: dict[str, Any], expected: bool) -> None:
    assert term_matches(term, "n1", LABELS) is expected


def _node(name: str, cpu: int = 1000, memory: int = 2**30, pods: int = 10, **kw: Any) -> NodeInfo:
    return NodeInfo(name, cpu, memory, pods, **kw)


def test_each_filter_names_its_reason() -> None:
    pod = PodInfo("t", "p", cpu_milli=500, memory=2**29, node_selector={"zone": "a"})
    tainted = _node("a", labels={"zone": "a"}, taints=(NO_SCHEDULE,))
    cordoned = _node("b", labels={"zone": "a"}, unschedulable=True)
    elsewhere = _node("c", labels={"zone": "b"})
    full = _node("d", cpu=400, memory=2**28, pods=0, labels={"zone": "a"})
    reasons = [run_filters(pod, n).reasons for n in (tainted, cordoned, elsewhere, full)]
    assert reasons == [
        ("node(s) had untolerated taint {k: v}",),
        ("node(s) were unschedulable",),
        ("node(s) didn't match Pod's node affinity/selector",),
        ("Too many pods", "Insufficient cpu", "Insufficient memory"),
    ]
    cordon_tolerated = PodInfo(
        "t", "p", tolerations=({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},)
    )
    assert run_filters(cordon_tolerated, cordoned).ok


def test_fit_error_is_upstreams_message() -> None:
    statuses = [
        Status("NodeResourcesFit", ("Insufficient cpu", "Insufficient memory")),
        Status("NodeResourcesFit", ("Insufficient cpu",)),
        Status("TaintToleration", ("node(s) had untolerated taint {k: v}",)),
    ]
    assert fit_error(3, statuses) == (
        "0/3 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint "
        "{k: v}, 2 Insufficient cpu."
    )  # sorted as strings, as upstream's sortReasonsHistogram
    assert fit_error(0, []) == "no nodes available to schedule pods"


def test_a_node_that_is_not_ready_carries_the_lifecycle_taint() -> None:
    node = {
        "metadata": {"name": "n", "labels": {}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "2", "memory": "1Gi", "pods": "5"},
            "conditions": [{"type": "Ready", "status": "False"}],
        },
    }
    info = node_info(node)
    assert (info.allocatable_cpu_milli, info.allocatable_memory, info.allocatable_pods) == (
        2000,
        2**30,
        5,
    )
    message = decide(PodInfo("t", "p"), [info]).message
    assert message == (
        "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."
    )


def test_score_prefers_the_least_allocated_then_the_first_name() -> None:
    pod = PodInfo("t", "p", cpu_milli=100, memory=2**20)
    busy, idle_b, idle_a = _node("busy"), _node("idle-b"), _node("idle-a")
    busy.add(500, 2**29)
    assert decide(pod, [busy, idle_b, idle_a]).node == "idle-a"
    soft = {"key": "k", "effect": "PreferNoSchedule"}
    idle_a.taints = (soft,)
    assert decide(pod, [busy, idle_b, idle_a]).node == "idle-b"


def test_pod_info_reads_requests_selectors_and_affinity() -> None:
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    pod = {
        "metadata": {"namespace": "t", "name": "p"},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "250m"}}}],
            "nodeSelector": {"disk": "ssd"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            },
        },
    }
    info = pod_info(pod)
    assert (info.cpu_milli, info.memory, dict(info.node_selector)) == (250, 0, {"disk": "ssd"})
    assert info.required_terms == (term,)


def test_queue_waits_for_a_change_then_the_backoff() -> None:
    queue = SchedulingQueue(SchedulerSettings(backoff_initial_s=0.0, backoff_max_s=0.0))
    queue.add(("t", "p"))
    assert queue.pop_ready() == [("t", "p")]
    queue.unschedulable(("t", "p"))
    assert queue.pop_ready() == [] and len(queue) == 1  # nothing changed: it waits
    queue.cluster_changed()
    assert queue.pop_ready() == [("t", "p")]
    slow = SchedulingQueue(SchedulerSettings(backoff_initial_s=60.0, backoff_max_s=60.0))
    slow.add(("t", "q"))
    slow.pop_ready()
    slow.retry(("t", "q"))
    assert slow.pop_ready() == []
    wakeup = slow.next_wakeup_s()
    assert wakeup is not None and 59 < wakeup <= 60


# --- the property ---------------------------------------------------------------------------
_nodes = st.lists(
    st.tuples(
        st.integers(0, 4000),  # allocatable milli-CPU
        st.integers(0, 8 * 2**30),  # allocatable memory
        st.integers(0, 5),  # allocatable pods
        st.integers(0, 4000),  # milli-CPU already requested there
        st.integers(0, 8 * 2**30),  # memory already requested there
        st.integers(0, 5),  # pods already there
        st.booleans(),  # cordoned
    ),
    min_size=1,
    max_size=6,
)
_pods = st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 4 * 2**30)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(nodes=_nodes, pods=_pods)
def test_never_places_a_pod_where_requests_would_exceed_allocatable(
    nodes: list[tuple[int, int, int, int, int, int, bool]], pods: list[tuple[int, int]]
) -> None:
    infos = []
    for i, (cpu, mem, npods, used_cpu, used_mem, used_pods, cordoned) in enumerate(nodes):
        info = NodeInfo(f"n{i}", cpu, mem, npods, unschedulable=cordoned)
        info.requested_cpu_milli, info.requested_memory, info.pods = used_cpu, used_mem, used_pods
        infos.append(info)
    start = {n.name: (n.requested_cpu_milli, n.requested_memory, n.pods) for n in infos}
    for j, (cpu, mem) in enumerate(pods):
        pod = PodInfo("t", f"p{j}", cpu_milli=cpu, memory=mem)
        decision = decide(pod, infos)
        if decision.node is None:
            assert all(not run_filters(pod, n).ok for n in infos)
            assert decision.message.startswith(f"0/{len(infos)} nodes are available")
            assert sum(len(s.reasons) > 0 for s in decision.statuses.values()) == len(infos)
            continue
        node = next(n for n in infos if n.name == decision.node)
        was = start[node.name]
        assert not node.unschedulable
        assert node.pods + 1 <= node.allocatable_pods
        # what this scheduler adds never takes a resource over (it may be over already)
        assert cpu == 0 or node.requested_cpu_milli + cpu <= node.allocatable_cpu_milli
        assert mem == 0 or node.requested_memory + mem <= node.allocatable_memory
        node.add(cpu, mem)
        assert node.requested_cpu_milli <= max(node.allocatable_cpu_milli, was[0])
        assert node.requested_memory <= max(node.allocatable_memory, was[1])
