"""Filters: may this pod class go on this node? Each returns a :class:`Status`, never raises.

Why plugins with kube-scheduler's reasons: users read "0/400 nodes are available: ..." from
``kubectl describe pod`` and compare it with what they know from kube-scheduler, so the
reasons use the same words. The filters run in kube-scheduler's order and the first failure
decides a node's reason, as in kube-scheduler.

Two kinds:

- *node* filters depend only on the pod class and the node's spec/status (labels, taints,
  conditions). The planner runs them once per (class, node) per plan;
- *capacity* filters depend on what is free on the node right now (``Capacity``); the
  planner turns them into a slot count, and re-runs them only to explain a failure.

Node conditions are judged through the taints the node lifecycle controller derives from
them (``node.kubernetes.io/not-ready`` etc.), so a pod that tolerates those taints (as
DaemonSet pods do) passes, exactly as on a real cluster where the taints are present.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.model import Code, NodeInfo, PodShape, Requirement, SelectorTerm, Status, Taint

__all__ = [
    "Capacity",
    "CapacityFilter",
    "NodeFilter",
    "capacity_filters",
    "condition_taints",
    "max_pods",
    "node_affinity",
    "node_conditions",
    "node_filters",
    "node_unschedulable",
    "resources_fit",
    "taint_toleration",
]

OK = Status()
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_CONDITION_TAINT_KEYS = (
    ("DiskPressure", "node.kubernetes.io/disk-pressure"),
    ("MemoryPressure", "node.kubernetes.io/memory-pressure"),
    ("NetworkUnavailable", "node.kubernetes.io/network-unavailable"),
    ("PIDPressure", "node.kubernetes.io/pid-pressure"),
)


@dataclass(frozen=True, slots=True)
class Capacity:
    """What new pods may still use on a node: allocatable - headroom - (actual + assumed)."""

    cpu: int
    memory: int
    storage: int
    pods: int
    extended: tuple[tuple[str, int], ...] = ()


NodeFilter = Callable[[PodShape, NodeInfo], Status]
CapacityFilter = Callable[[PodShape, Capacity], Status]


def _untolerated(pod: PodShape, taint: Taint) -> bool:
    return not any(t.tolerates(taint) for t in pod.tolerations)


def node_unschedulable(pod: PodShape, node: NodeInfo) -> Status:
    """A cordoned node admits only pods tolerating the unschedulable taint."""
    if node.unschedulable and _untolerated(pod, UNSCHEDULABLE_TAINT):
        return Status(Code.UNRESOLVABLE, ("node(s) were unschedulable",))
    return OK


def condition_taints(node: NodeInfo) -> tuple[Taint, ...]:
    """Taints the node lifecycle controller would put on a node with these conditions."""
    out: list[Taint] = []
    if node.ready == "False":
        out.append(Taint("node.kubernetes.io/not-ready", "", "NoSchedule"))
    elif node.ready == "Unknown":
        out.append(Taint("node.kubernetes.io/unreachable", "", "NoSchedule"))
    out.extend(
        Taint(key, "", "NoSchedule") for c, key in _CONDITION_TAINT_KEYS if c in node.pressure
    )
    return tuple(out)


def _taint_status(taint: Taint) -> Status:
    return Status(Code.UNRESOLVABLE, (f"node(s) had untolerated taint {taint.describe()}",))


def node_conditions(pod: PodShape, node: NodeInfo) -> Status:
    """NotReady, unreachable and pressure conditions, judged as their implied taints."""
    if node.ready in ("True", None) and not node.pressure:
        return OK
    for taint in condition_taints(node):
        if _untolerated(pod, taint):
            return _taint_status(taint)
    return OK


def taint_toleration(pod: PodShape, node: NodeInfo) -> Status:
    """NoSchedule and NoExecute taints must be tolerated (PreferNoSchedule only scores)."""
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and _untolerated(pod, taint):
            return _taint_status(taint)
    return OK


def _requirement_holds(req: Requirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        try:
            have, bound = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term_matches(term: SelectorTerm, node: NodeInfo) -> bool:
    # A term with no requirements matches no objects (Kubernetes API semantics).
    if not term.expressions and not term.fields:
        return False
    labels = node.labels
    if not all(_requirement_holds(r, labels.get(r.key)) for r in term.expressions):
        return False
    fields = {"metadata.name": node.name}
    return all(_requirement_holds(r, fields.get(r.key)) for r in term.fields)


def node_affinity(pod: PodShape, node: NodeInfo) -> Status:
    """nodeSelector (all labels equal) and required node affinity (terms ORed)."""
    labels = node.labels
    selector_ok = all(labels.get(k) == v for k, v in pod.node_selector)
    if selector_ok and (pod.affinity is None or any(_term_matches(t, node) for t in pod.affinity)):
        return OK
    return Status(Code.UNRESOLVABLE, ("node(s) didn't match Pod's node affinity/selector",))


def max_pods(pod: PodShape, free: Capacity) -> Status:
    """The node's pod count limit (``status.allocatable.pods``, the kubelet's maxPods)."""
    if free.pods < 1:
        return Status(Code.UNSCHEDULABLE, ("Too many pods",))
    return OK


def resources_fit(pod: PodShape, free: Capacity) -> Status:
    """Every requested resource fits in what is free; a zero request always fits."""
    req = pod.requests
    reasons = []
    if req.cpu > 0 and req.cpu > free.cpu:
        reasons.append("Insufficient cpu")
    if req.memory > 0 and req.memory > free.memory:
        reasons.append("Insufficient memory")
    if req.storage > 0 and req.storage > free.storage:
        reasons.append("Insufficient ephemeral-storage")
    if req.extended:
        have = dict(free.extended)
        reasons.extend(
            f"Insufficient {name}" for name, v in req.extended if v > 0 and v > have.get(name, 0)
        )
    return Status(Code.UNSCHEDULABLE, tuple(reasons)) if reasons else OK


def node_filters() -> tuple[NodeFilter, ...]:
    """The node filters in the order they run."""
    return (node_unschedulable, node_conditions, taint_toleration, node_affinity)


def capacity_filters() -> tuple[CapacityFilter, ...]:
    """The capacity filters in the order they run (after the node filters)."""
    return (max_pods, resources_fit)
