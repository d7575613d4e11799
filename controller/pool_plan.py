"""What the pool filler does next, decided without I/O: which slots to create, which pool
pods to delete.

Why a pure module: the filler's promises — never over-create, never touch a claimed pod,
nothing lingers past its announcement, earliest deadline first — are properties of one
decision over whatever the watches show, so a property test can drive it over any mix of
announcements and pods (tests/controller/test_pool_plan.py) without a cluster, and the I/O
around it (controller/pools.py) only carries the decision out.

The rules, for one snapshot (announcements from their informer, pool pods from the bound-pod
watch, the claimed pods from the claim book):

1. A **slot** is (announcement, image index, slot index < the image's count); its pod's name
   is :func:`kube.pool_contract.pool_pod_name` of the three, the same at every decision. A
   slot is wanted while its announcement is live (not expired, not being deleted, with
   ``sandboxes``).
2. A wanted slot without a pod is **created** — unless its name is *spent*: claimed now or
   ever seen claimed by this process (a claimed sandbox is the trainer's; its slot is not
   refilled when it is released). A slot whose pod exists is never created again, so a
   restart or a watch gap costs at most one AlreadyExists per slot (success), never a
   second pod.
3. An unclaimed pool pod is **deleted** when its announcement is no longer live or does not
   want its slot (``expired``), when it failed (``failed``), or when its node is lost,
   cordoned or not Ready (``node_lost``) — the last two are then created again under the
   same name once the old pod is gone. A claimed pod is never the filler's (its claim's
   lifecycle owns it, controller/claim_book.py); a pod being deleted is left alone.
4. A **standing pool** (an announcement with ``standing``: the tenant's configuration,
   facade/standing.py) has no fixed slots: it keeps ``min`` unclaimed pods that are Ready or
   starting on a good node (its *reserve*), creating the shortfall under slot numbers that
   only grow — from the highest of its recorded ``next_slot``, its pods' and its spent
   names' slots, plus one — so a claimed slot is never re-used, even once the claim and the
   pod are gone. It never has more than ``max`` pods at once, counting every pod of the
   pool that exists (claimed, starting, failing or being deleted), and never creates past
   its namespace's ``room`` (the tenant's limit less its live sandboxes, shared by the
   namespace's standing pools in the order they were created). A reserve above ``min``
   (the configuration lowered it) is trimmed, starting pods and then the highest slots
   first (``excess``). The plan carries the pool's new ``next_slot``: the filler records
   it before it creates the slots below it.
5. Creates come in **earliest-deadline-first** order (no deadline: last; then the oldest
   announcement), round-robin over an announcement's images, so a pacer that runs out part
   way has given every image of the most urgent announcement a share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Literal

from kube.pool_contract import pool_pod_name, pool_slot

__all__ = [
    "Announcement",
    "Create",
    "Delete",
    "PoolPlan",
    "PoolPod",
    "PoolPodState",
    "Standing",
    "plan",
    "wanted_names",
]

PoolPodState = Literal["starting", "ready", "failed"]
DeleteReason = Literal["expired", "failed", "node_lost", "excess"]


@dataclass(frozen=True, slots=True)
class Standing:
    """A standing pool's sizes and the slot its next create starts at, at least."""

    min: int
    max: int
    #: ``status.nextSlot``: every slot below it was used once.
    next_slot: int = 0


@dataclass(frozen=True, slots=True)
class Announcement:
    """One live or ended announcement with ``sandboxes`` (``live`` False: expired, being
    deleted, or no longer asking for sandboxes: its unclaimed pods go)."""

    namespace: str
    name: str
    images: tuple[tuple[str, int], ...]
    deadline: float | None = None
    created: float = 0.0
    live: bool = True
    standing: Standing | None = None


@dataclass(frozen=True, slots=True)
class PoolPod:
    """A pool pod as the watch shows it."""

    namespace: str
    name: str
    #: The announcement it was created for (its ``sandman.io/pool`` label).
    pool: str
    state: PoolPodState
    node_ok: bool = True
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class Create:
    namespace: str
    announcement: str
    image_index: int
    image: str
    slot: int

    @property
    def pod(self) -> str:
        return pool_pod_name(self.announcement, self.image_index, self.slot)


@dataclass(frozen=True, slots=True)
class Delete:
    namespace: str
    pod: str
    reason: DeleteReason


@dataclass(frozen=True, slots=True)
class PoolPlan:
    creates: tuple[Create, ...]
    deletes: tuple[Delete, ...]
    #: (namespace, announcement) -> a standing pool's new ``next_slot`` (when it grew): to
    #: be recorded before its creates are sent.
    next_slots: Mapping[tuple[str, str], int] = field(default_factory=dict)


def wanted_names(a: Announcement) -> dict[str, tuple[int, str, int]]:
    """pod name -> (image index, image, slot) of every slot the announcement wants (a
    standing pool's slots are not fixed: none here, see :func:`plan`)."""
    if a.standing is not None:
        return {}
    return {
        pool_pod_name(a.name, i, s): (i, image, s)
        for i, (image, count) in enumerate(a.images)
        for s in range(count)
    }


def plan(
    announcements: Iterable[Announcement],
    pods: Iterable[PoolPod],
    spent: Set[tuple[str, str]],
    room: Mapping[str, int] | None = None,
) -> PoolPlan:
    """The creates and deletes for this snapshot. ``spent``: (namespace, pod) of every pod
    name claimed now or ever seen claimed — never created again, never deleted here;
    ``room``: namespace -> how many sandboxes its standing pools may still add (absent:
    no bound)."""
    announcements = list(announcements)
    pods = list(pods)
    live = [a for a in announcements if a.live]
    standing = {(a.namespace, a.name): a for a in live if a.standing is not None}
    wanted: dict[tuple[str, str], Mapping[str, tuple[int, str, int]]] = {
        (a.namespace, a.name): wanted_names(a) for a in live if a.standing is None
    }
    present: set[tuple[str, str]] = set()
    deletes: list[Delete] = []
    for p in pods:
        key = (p.namespace, p.name)
        present.add(key)
        if key in spent or p.deleting or (p.namespace, p.pool) in standing:
            continue
        if p.name not in wanted.get((p.namespace, p.pool), {}):
            deletes.append(Delete(p.namespace, p.name, "expired"))
        elif p.state == "failed":
            deletes.append(Delete(p.namespace, p.name, "failed"))
        elif not p.node_ok:
            deletes.append(Delete(p.namespace, p.name, "node_lost"))
    creates: list[tuple[tuple[float, float, str, int, int], Create]] = []
    for a in live:
        if a.standing is not None:
            continue
        deadline = a.deadline if a.deadline is not None else math.inf
        for name, (i, image, s) in wanted[(a.namespace, a.name)].items():
            key = (a.namespace, name)
            if key in present or key in spent:
                continue
            order = (deadline, a.created, f"{a.namespace}/{a.name}", s, i)
            creates.append((order, Create(a.namespace, a.name, i, image, s)))
    creates.sort(key=lambda c: c[0])
    left = dict(room or {})
    next_slots: dict[tuple[str, str], int] = {}
    for a in sorted(standing.values(), key=lambda a: (a.created, a.namespace, a.name)):
        mine = [p for p in pods if p.namespace == a.namespace and p.pool == a.name]
        grown, gone = _standing(a, mine, spent, left)
        deletes += gone
        if grown:
            creates += [((math.inf, a.created, "", c.slot, 0), c) for c in grown]
            next_slots[(a.namespace, a.name)] = grown[-1].slot + 1
    return PoolPlan(tuple(c for _, c in creates), tuple(deletes), next_slots)


def _standing(
    a: Announcement, mine: list[PoolPod], spent: Set[tuple[str, str]], room: dict[str, int]
) -> tuple[list[Create], list[Delete]]:
    """One standing pool's creates (the reserve's shortfall, within ``max`` and the
    namespace's room, which it takes from) and deletes."""
    assert a.standing is not None
    sizes, image = a.standing, a.images[0][0]
    deletes: list[Delete] = []
    reserve: list[tuple[int, PoolPod]] = []
    top = sizes.next_slot - 1
    for p in mine:
        slot = pool_slot(a.name, p.name)
        top = max(top, slot[1] if slot else -1)
        if (p.namespace, p.name) in spent or p.deleting:
            continue
        if slot is None or slot[0] != 0:
            deletes.append(Delete(p.namespace, p.name, "expired"))
        elif p.state == "failed":
            deletes.append(Delete(p.namespace, p.name, "failed"))
        elif not p.node_ok:
            deletes.append(Delete(p.namespace, p.name, "node_lost"))
        else:
            reserve.append((slot[1], p))
    for ns, name in spent:
        slot = pool_slot(a.name, name) if ns == a.namespace else None
        top = max(top, slot[1] if slot else -1)
    # Trim a reserve above min: starting pods first, then the highest slots.
    reserve.sort(key=lambda r: (r[1].state == "starting", r[0]), reverse=True)
    excess = max(0, len(reserve) - sizes.min)
    deletes += [Delete(p.namespace, p.name, "excess") for _, p in reserve[:excess]]
    short = sizes.min - (len(reserve) - excess)
    allowed = room.get(a.namespace, math.inf)
    n = int(max(0, min(short, sizes.max - len(mine), allowed)))
    if a.namespace in room:
        room[a.namespace] -= n
    return [Create(a.namespace, a.name, 0, image, top + 1 + k) for k in range(n)], deletes
