"""Whether a pod fits a node, and how many more of a class fit: one definition of "fits".

The placement loop counts a node's slots for a class, the explanation of an unplaced pod
runs the filters, and the tests and the benchmark check both: they share these functions, so
the slot count a node offers a class is exactly the number of times the capacity filters
would pass, and a pod reported unschedulable is one the filters refuse everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.cluster import NodeUsage
from scheduler.filters import Capacity, NodeFilter, capacity_filters, node_filters
from scheduler.model import NodeInfo, PodShape, Resources, Status

__all__ = ["capacity_left", "check_capacity", "check_node", "slots_for", "slots_left"]


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
