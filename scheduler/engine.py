"""The :class:`Scheduler`: one object a controller feeds with events and asks for plans.

Why a facade: the controller should not need to know that the capacity model, the assumed
ledger and the steps of a plan (:func:`plan_batch`, below) are separate pieces. It forwards
watch events, calls :meth:`Scheduler.plan` with the pending sandbox pods and the current
time, binds the assignments, and reports failed binds with :meth:`Scheduler.forget`. Time is
always passed in (``now``, in seconds on any monotonic clock the caller chooses); the
scheduler never reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler import gang
from scheduler.classes import Classes, equivalence_classes, placement_groups
from scheduler.cluster import ClusterModel, UsageSnapshot
from scheduler.filters import Capacity
from scheduler.fit import capacity_left
from scheduler.gang import GangRoom
from scheduler.model import NodeInfo, Pod
from scheduler.placement_loop import Placer
from scheduler.plan import Plan
from scheduler.settings import SchedulerSettings
from scheduler.table import NodeTable, node_limit

__all__ = ["Scheduler", "plan_batch"]


class Scheduler:
    """Capacity model + assumed ledger + batch planner, with one set of settings."""

    def __init__(self, settings: SchedulerSettings | None = None) -> None:
        self.settings = settings or SchedulerSettings()
        self.model = ClusterModel()
        self._table = NodeTable(self.settings)
        #: Members of groups waiting for the rest of their group (scheduler/gang.py).
        self.gangs = GangRoom(wait_s=self.settings.group_wait_s)

    # -- events --------------------------------------------------------------------------
    def apply(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply one watch event: ``kind`` "Node"/"Pod", ``event_type`` ADDED/MODIFIED/DELETED."""
        self.model.apply(kind, event_type, obj)
        if kind == "Pod" and self.gangs.waiting:
            gone = event_type == "DELETED" or (obj.get("spec") or {}).get("nodeName")
            if gone:  # deleted, or bound by someone else: it waits no more
                self.gangs.discard(self._uid(obj))

    def upsert_node(self, node: NodeInfo | Mapping[str, Any]) -> None:
        self.model.upsert_node(node)

    def delete_node(self, name: str) -> None:
        self.model.delete_node(name)

    def upsert_pod(self, pod: Pod | Mapping[str, Any]) -> None:
        self.model.upsert_pod(pod)

    def delete_pod(self, pod: Pod | Mapping[str, Any] | str) -> None:
        self.model.delete_pod(pod)
        if self.gangs.waiting:
            uid = pod if isinstance(pod, str) else self._uid(pod)
            self.gangs.discard(uid)

    @staticmethod
    def _uid(pod: Pod | Mapping[str, Any]) -> str:
        if isinstance(pod, Pod):
            return pod.uid
        meta = pod.get("metadata") or {}
        return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")

    def decode_pod(self, obj: Mapping[str, Any]) -> Pod:
        """Decode a pending pod once, when its watch event arrives, for a later :meth:`plan`
        (plans accept JSON too, but decoding is the larger part of their cost)."""
        return self.model.decoder.pod(obj)

    def set_prepared_images(self, node: str, images: Iterable[str]) -> None:
        """Record the images the node agent has prepared on ``node`` (image locality)."""
        self.model.set_prepared_images(node, images)

    # -- planning and the ledger ---------------------------------------------------------
    def plan(
        self, pending: Iterable[Pod | Mapping[str, Any]], now: float, *, reserve: bool = True
    ) -> Plan:
        """Place ``pending`` pods. Assignments are reserved until a pod event shows the
        binding (confirm), :meth:`forget`, or expiry: ``now + bind_timeout_s``, shortened
        to ``assume_ttl_s`` after :meth:`finish_binding`.

        With ``reserve=False`` the plan is a dry run and the model is left unchanged.
        """
        gangs = self.gangs if reserve else self.gangs.copy()
        if not reserve:  # a dry run leaves no expected pulls behind either
            incoming = self.model.incoming_state()
        result = plan_batch(self.model, self.settings, pending, now, self._table, gangs)
        if not reserve:
            for assignment in result.assignments:
                self.model.forget(assignment.uid)
            self.model.restore_incoming(incoming)
        return result

    def finish_binding(self, uids: Iterable[str], now: float) -> int:
        """The binds of ``uids`` succeeded: keep their reservations ``assume_ttl_s`` more
        seconds for the watch to confirm them (kube-scheduler's FinishBinding). Returns how
        many were still reserved (the watch may have confirmed some already)."""
        return self.model.extend(uids, now + self.settings.assume_ttl_s)

    def forget(self, uid: str) -> bool:
        """Release a reservation (the bind failed). Idempotent."""
        return self.model.forget(uid)

    def reserved_on(self, uid: str) -> str | None:
        """The node ``uid`` holds a reservation on (None: it holds none)."""
        r = self.model.ledger.get(uid)
        return None if r is None else r.node

    def expire(self, now: float) -> list[str]:
        """Release reservations whose deadline passed; returns their uids."""
        return self.model.expire(now)

    # -- queries -------------------------------------------------------------------------
    def free(self, node: str) -> Capacity:
        """What new pods may still use on ``node`` (after headroom, actual and assumed)."""
        info = self.model.nodes[node]
        return capacity_left(node_limit(info, self.settings), self.model.usage[node])

    def usage(self, node: str) -> UsageSnapshot:
        """Requested resources, pod count, start queue and assumed pods on ``node``."""
        return self.model.usage_of(node)

    def stats(self) -> dict[str, int]:
        """Sizes for metrics: nodes, pods counted on nodes, open reservations."""
        return {
            "nodes": len(self.model.nodes),
            "pods": self.model.held_pods(),
            "reserved": len(self.model.ledger),
        }


def plan_batch(
    model: ClusterModel,
    settings: SchedulerSettings,
    pending: Iterable[Pod | Mapping[str, Any]],
    now: float,
    table: NodeTable | None = None,
    room: gang.GangRoom | None = None,
) -> Plan:
    """Plan ``pending`` onto the model's nodes, reserving every assignment in the ledger:
    the batch as equivalence classes (classes.py), grouped pods to the gang room and the
    ready gangs placed whole, then every group by the placement loop, then the reasons of
    whatever is left (placement_loop.py).

    Pass the same ``table`` (built with the same settings) to successive calls to reuse the
    per-node facts; without one, they are computed afresh. Members of gangs (the groups a
    trainer asked for, gang.py) wait in ``room`` across calls until their gang is complete
    (without one, a call's own members are all there is); gangs are placed before the rest,
    whole or not at all.
    """
    classes, skipped, rejected = equivalence_classes(model, pending)
    placer = Placer(model, settings, table or NodeTable(settings), now)
    waiting = _place_gangs(placer, classes, room or gang.GangRoom(wait_s=0.0), now, settings)
    for base, members in placement_groups(model, classes):
        placer.place_group(base, members)
    placer.explain()
    return Plan(
        tuple(placer.assignments),
        tuple(placer.unschedulable),
        tuple(placer.deferred),
        tuple(skipped),
        len(classes),
        tuple(rejected),
        waiting,
    )


def _place_gangs(
    placer: Placer,
    classes: Classes,
    room: gang.GangRoom,
    now: float,
    settings: SchedulerSettings,
) -> tuple[str, ...]:
    """Take gang members out of ``classes`` into the room, place the gangs that are ready
    (in the order they completed), report those whose wait ran out; the uids still waiting."""
    for shape in list(classes):
        pods = classes[shape]
        grouped = [p for p in pods if p.group is not None]
        if not grouped:
            continue
        for pod in grouped:
            room.add(pod, now)
        rest = [p for p in pods if p.group is None]
        if rest:
            classes[shape] = rest
        else:
            del classes[shape]
    room.expire(now)
    ready, timed_out, still = room.ready(now)
    for key, members in ready:
        if placer.place_gang(key, members):
            room.admit(key, now + settings.group_ttl_s)
    by_group: dict[str, list[Pod]] = {}
    for pod in timed_out:
        by_group.setdefault(pod.group or "", []).append(pod)
    for key, members in by_group.items():
        size = max(p.group_size for p in members)
        placer.reject(members, gang.waiting_status(key, len(members), size))
    return tuple(still)
