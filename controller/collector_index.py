"""Which sandbox pods a garbage-collection scan has to look at (controller/collector.py).

Why: the collector's verdicts depend on few facts of a pod — a wall-clock deadline
(``expired``: the expiry annotation; ``pending-timeout``: creation plus the pending deadline,
while unbound), a terminal phase, and whether its node still exists. Walking every cached pod
every scan to find the few with one of those made each scan O(pods), and a burst paced by
the API server lasts longer the more pods it has, so the collector's share of the
controller's CPU per bind grew with the burst (at 50,000 sandboxes: ~0.5 s per scan, ~90
scans in the burst). These handlers keep those facts per sandbox as the informers deliver
events (O(1) each), and a scan asks only for the pods whose deadline passed, the terminal
ones and those of nodes missing from the node cache.

Deadlines go on a heap with lazy deletion (an entry counts only while it is the pod's current
deadline); a pod whose deadline passed stays *due* until it leaves the caches or its deadline
moves, so a delete that failed is tried again on the next scan, as before.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterable

from controller.view import ClusterView
from kube.cache import Obj
from kube.informer import Handlers
from kube.times import epoch_seconds

__all__ = ["Candidates"]

_TERMINAL = ("Succeeded", "Failed")


class Candidates:
    """Sandbox pods (``schedulerName`` ours) of the view's bound and pending caches, indexed
    by what can make them due. Handlers are registered at construction (and replayed over
    what the informers already hold)."""

    def __init__(
        self,
        view: ClusterView,
        expires_annotation: str,
        pending_deadline_s: float,
        expiry: Callable[[Obj], str | None] | None = None,
    ):
        self._view = view
        self._scheduler_name = view.settings.scheduler_name
        self._expires = expires_annotation
        #: A pod's expiry (RFC 3339): its annotation, or its claim's (controller/claim_life.py).
        self._expiry = expiry or (
            lambda pod: (pod["metadata"].get("annotations") or {}).get(expires_annotation)
        )
        self._pending_deadline_s = pending_deadline_s
        self.bound: dict[str, Obj] = {}  # uid -> the bound cache's object
        self.pending: dict[str, Obj] = {}  # uid -> the pending cache's object
        self._terminal: set[str] = set()  # bound uids in a terminal phase
        self._by_node: dict[str, set[str]] = {}  # node name -> bound uids
        self._deadline: dict[str, float] = {}  # uid -> wall time a reason becomes due
        self._heap: list[tuple[float, str]] = []
        self._due: set[str] = set()  # uids whose deadline passed
        view.bound.add_handler(
            Handlers(add=self._bound, update=self._bound_updated, delete=self._unbound)
        )
        view.pending.add_handler(
            Handlers(
                add=self._pending, update=lambda _old, new: self._pending(new), delete=self._unpend
            )
        )

    def _ours(self, pod: Obj) -> bool:
        return (pod.get("spec") or {}).get("schedulerName") == self._scheduler_name

    # --- handlers -----------------------------------------------------------------------
    def _bound(self, pod: Obj) -> None:
        if not self._ours(pod):
            return
        uid = pod["metadata"]["uid"]
        node = pod["spec"].get("nodeName") or ""
        old = self.bound.get(uid)
        if old is None or (old["spec"].get("nodeName") or "") != node:
            if old is not None:
                self._leave_node(uid, old)
            self._by_node.setdefault(node, set()).add(uid)
        self.bound[uid] = pod
        if (pod.get("status") or {}).get("phase") in _TERMINAL:
            self._terminal.add(uid)
        else:
            self._terminal.discard(uid)
        self._reschedule(uid)

    def _bound_updated(self, old: Obj, new: Obj) -> None:
        """The common event of a burst (a bound sandbox's status moved): no more than the
        phase to look at, unless its node, its expiry or its pending twin says otherwise."""
        uid = new["metadata"]["uid"]
        if (
            uid not in self.bound
            or uid in self.pending
            or old["spec"].get("nodeName") != new["spec"].get("nodeName")
            or (old["metadata"].get("annotations") or {}).get(self._expires)
            != (new["metadata"].get("annotations") or {}).get(self._expires)
        ):
            self._bound(new)
            return
        self.bound[uid] = new
        if (new.get("status") or {}).get("phase") in _TERMINAL:
            self._terminal.add(uid)
        else:
            self._terminal.discard(uid)

    def _unbound(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        old = self.bound.pop(uid, None)
        if old is not None:
            self._leave_node(uid, old)
            self._terminal.discard(uid)
            self._reschedule(uid)

    def _leave_node(self, uid: str, pod: Obj) -> None:
        node = pod["spec"].get("nodeName") or ""
        members = self._by_node.get(node)
        if members is not None:
            members.discard(uid)
            if not members:
                del self._by_node[node]

    def _pending(self, pod: Obj) -> None:
        if self._ours(pod):
            uid = pod["metadata"]["uid"]
            self.pending[uid] = pod
            self._reschedule(uid)

    def _unpend(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        if self.pending.pop(uid, None) is not None:
            self._reschedule(uid)

    # --- deadlines ----------------------------------------------------------------------
    def _wall_deadline(self, uid: str) -> float | None:
        """When ``expired`` or ``pending-timeout`` would apply to the pod (None: never)."""
        pending = self.pending.get(uid)
        pod = self.bound.get(uid) or pending
        if pod is None:
            return None
        deadline = epoch_seconds(self._expiry(pod))
        if pending is not None and not (pending.get("spec") or {}).get("nodeName"):
            created = epoch_seconds(pending["metadata"].get("creationTimestamp"))
            if created is not None:
                stuck = created + self._pending_deadline_s
                deadline = stuck if deadline is None else min(deadline, stuck)
        return deadline

    def _reschedule(self, uid: str) -> None:
        deadline = self._wall_deadline(uid)
        if deadline is None:
            self._deadline.pop(uid, None)
            self._due.discard(uid)
        elif self._deadline.get(uid) != deadline:
            self._deadline[uid] = deadline
            self._due.discard(uid)
            heapq.heappush(self._heap, (deadline, uid))
            if len(self._heap) > 2 * len(self._deadline) + 1024:
                self._heap = [(d, u) for u, d in self._deadline.items()]
                heapq.heapify(self._heap)

    def refresh(self, namespace: str, names: Iterable[str]) -> None:
        """The deadlines of these pods again (their claim appeared, changed or went)."""
        for name in names:
            for cache in (self._view.bound.cache, self._view.pending.cache):
                pod = cache.get(f"{namespace}/{name}")
                if pod is not None:
                    self._reschedule(pod["metadata"]["uid"])

    # --- what a scan looks at -----------------------------------------------------------
    def known(self, uid: str) -> bool:
        return uid in self.bound or uid in self.pending

    def for_scan(self, wall: float, nodes: Container[str]) -> tuple[list[Obj], list[Obj]]:
        """(bound pods, pending pods) that may be due at ``wall``: those whose deadline
        passed, the terminal bound ones and the bound ones on nodes not in ``nodes``."""
        heap, current = self._heap, self._deadline
        while heap and heap[0][0] <= wall:
            deadline, uid = heapq.heappop(heap)
            if current.get(uid) == deadline:
                self._due.add(uid)
        uids = self._terminal | {u for u in self._due if u in self.bound}
        for node, members in self._by_node.items():
            if node not in nodes:
                uids |= members
        bound = [self.bound[u] for u in sorted(uids)]
        pending = [self.pending[u] for u in sorted(self._due) if u in self.pending]
        return bound, pending
