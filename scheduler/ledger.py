"""The assumed ledger: capacity reserved for assignments the cluster has not confirmed yet.

Why: between "the planner chose node A" and "the watch shows the pod bound to A" there are
a bind request and a watch round trip. Without a reservation the next plan would see A's
capacity as still free and overcommit it. kube-scheduler solves this with "assumed pods";
this is the same idea for batches:

- ``reserve`` when the plan assigns a pod (capacity is taken at once);
- ``confirm`` when the pod is observed bound (the real pod then holds the capacity);
- ``forget`` when the bind failed, and ``expire(now)`` for reservations whose confirmation
  never came (a lost bind, a crashed binder). ``forget`` is idempotent.

The ledger only keeps the books; :class:`scheduler.cluster.ClusterModel` applies them to node
usage so a reservation and its release are exactly symmetric. Time is whatever the caller
passes as ``now``: the ledger never reads a clock.

A run of identical pods reserved on one node in one step shares a single
:class:`Reservation` object and a single expiry entry, which keeps a 10k-pod plan cheap.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, KeysView
from dataclasses import dataclass

from scheduler.model import Resources

__all__ = ["AssumedLedger", "Reservation"]


@dataclass(frozen=True, slots=True, eq=False)
class Reservation:
    """Capacity held on ``node`` per pod, until ``deadline`` (caller's clock, seconds)."""

    node: str
    requests: Resources
    deadline: float


class AssumedLedger:
    """Reservations by pod uid, with expiry ordered by deadline."""

    __slots__ = ("_by_uid", "_expiry", "_seq")

    def __init__(self) -> None:
        self._by_uid: dict[str, Reservation] = {}
        self._expiry: list[tuple[float, int, tuple[str, ...]]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, uid: object) -> bool:
        return uid in self._by_uid

    def uids(self) -> KeysView[str]:
        """A live read-only view of the reserved uids."""
        return self._by_uid.keys()

    def get(self, uid: str) -> Reservation | None:
        return self._by_uid.get(uid)

    def overlaps(self, uids: Collection[str]) -> bool:
        """Is any of ``uids`` reserved already?"""
        return not self._by_uid.keys().isdisjoint(uids)

    def add(self, uids: tuple[str, ...], reservation: Reservation) -> None:
        """Record ``reservation`` for each of ``uids`` (none of which may be reserved)."""
        by_uid = self._by_uid
        by_uid.update(dict.fromkeys(uids, reservation))
        self._seq += 1
        heapq.heappush(self._expiry, (reservation.deadline, self._seq, uids))
        if len(self._expiry) > 2 * len(by_uid) + 1024:
            self._compact()

    def _compact(self) -> None:
        """Drop expiry entries of confirmed/forgotten reservations (bounded memory)."""
        self._expiry = [(r.deadline, i, (uid,)) for i, (uid, r) in enumerate(self._by_uid.items())]
        heapq.heapify(self._expiry)
        self._seq = len(self._expiry)

    def pop(self, uid: str) -> Reservation | None:
        """Remove and return the reservation for ``uid`` (None if there is none)."""
        return self._by_uid.pop(uid, None)

    def due(self, now: float) -> list[tuple[str, Reservation]]:
        """Remove and return reservations whose deadline is at or before ``now``."""
        out: list[tuple[str, Reservation]] = []
        heap, by_uid = self._expiry, self._by_uid
        while heap and heap[0][0] <= now:
            _, _, uids = heapq.heappop(heap)
            for uid in uids:
                current = by_uid.get(uid)
                # Skip uids confirmed, forgotten or re-reserved since (stale entries).
                if current is not None and current.deadline <= now:
                    out.append((uid, by_uid.pop(uid)))
        if not by_uid:
            heap.clear()
        return out

    def items(self) -> list[tuple[str, Reservation]]:
        return list(self._by_uid.items())
