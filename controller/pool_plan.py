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
4. Creates come in **earliest-deadline-first** order (no deadline: last; then the oldest
   announcement), round-robin over an announcement's images, so a pacer that runs out part
   way has given every image of the most urgent announcement a share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Literal

from kube.pool_contract import pool_pod_name

__all__ = [
    "Announcement",
    "Create",
    "Delete",
    "PoolPlan",
    "PoolPod",
    "PoolPodState",
    "plan",
    "wanted_names",
]

PoolPodState = Literal["starting", "ready", "failed"]
DeleteReason = Literal["expired", "failed", "node_lost"]


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


def wanted_names(a: Announcement) -> dict[str, tuple[int, str, int]]:
    """pod name -> (image index, image, slot) of every slot the announcement wants."""
    return {
        pool_pod_name(a.name, i, s): (i, image, s)
        for i, (image, count) in enumerate(a.images)
        for s in range(count)
    }


def plan(
    announcements: Iterable[Announcement],
    pods: Iterable[PoolPod],
    spent: Set[tuple[str, str]],
) -> PoolPlan:
    """The creates and deletes for this snapshot. ``spent``: (namespace, pod) of every pod
    name claimed now or ever seen claimed — never created again, never deleted here."""
    live = [a for a in announcements if a.live]
    wanted: dict[tuple[str, str], Mapping[str, tuple[int, str, int]]] = {
        (a.namespace, a.name): wanted_names(a) for a in live
    }
    present: set[tuple[str, str]] = set()
    deletes: list[Delete] = []
    for p in pods:
        key = (p.namespace, p.name)
        present.add(key)
        if key in spent or p.deleting:
            continue
        if p.name not in wanted.get((p.namespace, p.pool), {}):
            deletes.append(Delete(p.namespace, p.name, "expired"))
        elif p.state == "failed":
            deletes.append(Delete(p.namespace, p.name, "failed"))
        elif not p.node_ok:
            deletes.append(Delete(p.namespace, p.name, "node_lost"))
    creates: list[tuple[tuple[float, float, str, int, int], Create]] = []
    for a in live:
        deadline = a.deadline if a.deadline is not None else math.inf
        for name, (i, image, s) in wanted[(a.namespace, a.name)].items():
            key = (a.namespace, name)
            if key in present or key in spent:
                continue
            order = (deadline, a.created, f"{a.namespace}/{a.name}", s, i)
            creates.append((order, Create(a.namespace, a.name, i, image, s)))
    creates.sort(key=lambda c: c[0])
    return PoolPlan(tuple(c for _, c in creates), tuple(deletes))
