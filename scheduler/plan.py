"""What a plan is made of, and the checks that decide whether a pod fits a node.

Kept apart from the planner so the placement loop (placer.py), the planner's batch logic
(planner.py), tests and callers share one definition of "fits": the slot count a node
offers a class is exactly the number of times the capacity filters would pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from scheduler.cluster import NodeUsage
from scheduler.filters import Capacity, NodeFilter, capacity_filters, node_filters
from scheduler.model import NodeInfo, PodShape, Resources, Status

__all__ = [
    "Assignment",
    "Plan",
    "Unschedulable",
    "capacity_left",
    "check_capacity",
    "check_node",
    "slots_for",
    "slots_left",
]


class Assignment(NamedTuple):
    """Pod ``uid`` goes to ``node`` (a named tuple: a plan holds thousands of them)."""

    uid: str
    node: str
    namespace: str = ""
    name: str = ""

    def binding(self) -> dict[str, Any]:
        """The body of ``POST /api/v1/namespaces/{namespace}/pods/{name}/binding``.

        ``metadata.uid`` makes the API server refuse the bind (409) if the pod was deleted
        and re-created under the same name since it was planned.
        """
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
        }


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A pod no node can take now, with kube-scheduler's message and reason counts."""

    uid: str
    message: str
    reasons: tuple[tuple[str, int], ...]
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    """The outcome of one batch: who goes where, and why the rest cannot go anywhere.

    Every assignment is already reserved in the assumed ledger (unless planned with
    ``reserve=False``); bind them, and ``forget`` the ones whose bind fails.
    """

    assignments: tuple[Assignment, ...]
    unschedulable: tuple[Unschedulable, ...] = ()
    #: Pods held back because every node's start queue is full (``defer_over_cap``).
    deferred: tuple[str, ...] = ()
    #: Pods not planned: already bound, already reserved, or listed twice.
    skipped: tuple[str, ...] = ()
    #: Number of equivalence classes the batch formed.
    classes: int = 0
    #: Objects that are not valid pods (uid, reason); the rest of the batch is planned.
    rejected: tuple[tuple[str, str], ...] = ()
    #: Members of groups waiting for the rest of their group (scheduler/gang.py): neither
    #: placed nor unschedulable yet; a later plan places them with the others.
    waiting: tuple[str, ...] = ()

    def by_node(self) -> dict[str, int]:
        """Pods assigned per node."""
        out: dict[str, int] = {}
        for a in self.assignments:
            out[a.node] = out.get(a.node, 0) + 1
        return out

    @property
    def nodes_used(self) -> int:
        return len(self.by_node())


def capacity_left(limit: Capacity, usage: NodeUsage) -> Capacity:
    """Free capacity for new pods: the node's limit (after headroom) minus actual + assumed."""
    extended = limit.extended
    if extended or usage.extended:
        names = {n for n, _ in extended} | set(usage.extended)
        have = dict(extended)
        extended = tuple(sorted((n, have.get(n, 0) - usage.extended.get(n, 0)) for n in names))
    return Capacity(
        limit.cpu - usage.cpu,
        limit.memory - usage.memory,
        limit.storage - usage.storage,
        limit.pods - usage.pods,
        extended,
    )


def slots_for(req: Resources, free: Capacity) -> int:
    """How many more pods requesting ``req`` fit in ``free`` (consistent with the filters)."""
    slots = free.pods
    if req.cpu > 0:
        slots = min(slots, free.cpu // req.cpu)
    if req.memory > 0:
        slots = min(slots, free.memory // req.memory)
    if req.storage > 0:
        slots = min(slots, free.storage // req.storage)
    if req.extended:
        have = dict(free.extended)
        for name, value in req.extended:
            if value > 0:
                slots = min(slots, have.get(name, 0) // value)
    return max(slots, 0)


def _first_failure(statuses: Iterable[Status]) -> Status:
    for status in statuses:
        if not status.ok:
            return status
    return Status()


def check_node(shape: PodShape, node: NodeInfo, extra: tuple[NodeFilter, ...] = ()) -> Status:
    """Run the node filters (built-in, then ``extra``) in order; the first failure counts."""
    return _first_failure(f(shape, node) for f in node_filters() + extra)


def check_capacity(shape: PodShape, free: Capacity) -> Status:
    """Run the capacity filters and merge their reasons.

    In kube-scheduler, "Too many pods" and "Insufficient <resource>" come from one plugin
    (NodeResourcesFit), so a node short of pod slots *and* CPU reports both; merging keeps
    the messages identical.
    """
    failed = [s for s in (f(shape, free) for f in capacity_filters()) if not s.ok]
    if len(failed) <= 1:
        return failed[0] if failed else Status()
    return Status(max(s.code for s in failed), tuple(r for s in failed for r in s.reasons))


def slots_left(req: Resources, limit: Capacity, usage: NodeUsage) -> int:
    """``slots_for(req, capacity_left(limit, usage))`` without building the Capacity."""
    if req.extended or usage.extended or limit.extended:
        return slots_for(req, capacity_left(limit, usage))
    slots = limit.pods - usage.pods
    if req.cpu > 0:
        slots = min(slots, (limit.cpu - usage.cpu) // req.cpu)
    if req.memory > 0:
        slots = min(slots, (limit.memory - usage.memory) // req.memory)
    if req.storage > 0:
        slots = min(slots, (limit.storage - usage.storage) // req.storage)
    return max(slots, 0)
