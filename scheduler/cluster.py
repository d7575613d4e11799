"""The cluster capacity model, kept current from Node and Pod events.

Why every pod: the cluster is shared. Other tenants' pods, DaemonSets and pods bound by
kube-scheduler take capacity on the same nodes, and the kubelet admits a pod against *all*
active pods. So the model counts every non-terminal pod bound to a node, whoever placed it,
exactly as the kubelet would: Succeeded/Failed pods free their capacity; a pod being deleted
keeps it until all its containers have stopped.

Why incremental: a busy cluster sends thousands of pod events per second. Each event
adjusts one node's usage by one pod's requests (O(1)); nothing is recomputed from scratch.

Assumed pods (see ledger.py) are added to the same usage counters, so "free" always means
allocatable minus (actual + assumed), the invariant the planner relies on.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.decoder import Decoder
from scheduler.ledger import AssumedLedger, Reservation
from scheduler.model import NodeInfo, Pod, Resources

__all__ = ["ClusterModel", "IncomingState", "NodeUsage", "UsageSnapshot"]


class NodeUsage:
    """Mutable per-node totals of what active and assumed pods request."""

    __slots__ = ("assumed", "cpu", "extended", "memory", "pods", "starting", "storage")

    def __init__(self) -> None:
        self.cpu = 0
        self.memory = 0
        self.storage = 0
        self.pods = 0
        self.starting = 0
        self.assumed = 0
        self.extended: dict[str, int] = {}

    def add(self, req: Resources, count: int, starting: bool) -> None:
        """Add ``count`` pods requesting ``req`` each (a negative count removes them)."""
        self.cpu += count * req.cpu
        self.memory += count * req.memory
        self.storage += count * req.storage
        self.pods += count
        if starting:
            self.starting += count
        for name, value in req.extended:
            left = self.extended.get(name, 0) + count * value
            if left:
                self.extended[name] = left
            else:
                self.extended.pop(name, None)

    def snapshot(self) -> UsageSnapshot:
        return UsageSnapshot(
            Resources(self.cpu, self.memory, self.storage, tuple(sorted(self.extended.items()))),
            self.pods,
            self.starting,
            self.assumed,
        )


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """An immutable copy of a node's usage (for callers, tests and metrics)."""

    requested: Resources
    pods: int
    starting: int
    assumed: int


class _Either(Collection[str]):
    """Membership in either of two sets, without building their union per query."""

    __slots__ = ("_a", "_b")

    def __init__(self, a: frozenset[str], b: frozenset[str]) -> None:
        self._a, self._b = a, b

    def __contains__(self, item: object) -> bool:
        return item in self._a or item in self._b

    def __iter__(self) -> Iterator[str]:
        return iter(self._a | self._b)

    def __len__(self) -> int:
        return len(self._a | self._b)


#: Expected pulls as :meth:`ClusterModel.incoming_state` copies them: by node, by image,
#: the expiry heap and its compaction mark.
IncomingState = tuple[
    dict[str, dict[str, float]], dict[str, set[str]], list[tuple[float, str, str]], int
]
# What the model remembers of a counted pod: (node, requests, starting).
_Held = tuple[str, Resources, bool]


class ClusterModel:
    """Nodes, their usage by all active pods, and the assumed ledger."""

    def __init__(self, decoder: Decoder | None = None) -> None:
        self.decoder = decoder or Decoder()
        self.nodes: dict[str, NodeInfo] = {}
        self.usage: dict[str, NodeUsage] = {}
        self.prepared: dict[str, frozenset[str]] = {}
        self.ledger = AssumedLedger()
        self._held: dict[str, _Held] = {}
        #: Changes whenever a node name is added or removed (not on updates).
        self.node_set_version = 0
        #: Changes on every node add, update or removal.
        self.node_version = 0
        #: Changes whenever a node's set of prepared images changes.
        self.prepared_version = 0
        #: Images that pods placed by recent plans will pull: node -> image -> until when
        #: (the planner's clock). A later pod of the same image shares that pull instead of
        #: starting another one elsewhere; a node's count of them is its pull queue.
        self.incoming: dict[str, dict[str, float]] = {}
        #: The same, by image: image -> nodes.
        self.incoming_nodes: dict[str, set[str]] = {}
        #: (until, node, image) of every noted pull, earliest first, so expiry looks at the
        #: due ones only (scanning every node each second was O(nodes) per second, which a
        #: burst lasting longer the bigger it is turns into more than O(1) per pod). An entry
        #: counts while ``incoming`` still holds that ``until``; stale ones are skipped.
        self._incoming_due: list[tuple[float, str, str]] = []
        self._incoming_compact_at = 1024
        #: Entries the last expiry looked at (tests, profiles).
        self.incoming_examined = 0

    # -- nodes -------------------------------------------------------------------------
    def upsert_node(self, node: NodeInfo | Mapping[str, Any]) -> NodeInfo:
        """Add or replace a node (from a Node object or a :class:`NodeInfo`)."""
        info = node if isinstance(node, NodeInfo) else self.decoder.node(node)
        if info.name not in self.nodes:
            self.node_set_version += 1
        self.node_version += 1
        self.nodes[info.name] = info
        self.usage.setdefault(info.name, NodeUsage())
        return info

    def delete_node(self, name: str) -> None:
        """Forget a node. Its pods stay counted until their own delete events arrive."""
        if self.nodes.pop(name, None) is not None:
            self.node_set_version += 1
            self.node_version += 1
        if self.prepared.pop(name, None) is not None:
            self.prepared_version += 1
        for image in self.incoming.pop(name, {}):
            self.incoming_nodes.get(image, set()).discard(name)

    def set_prepared_images(self, node: str, images: Iterable[str]) -> None:
        """Images the node agent reports as pulled and ready on ``node`` (an unchanged set
        costs nothing: the image index is rebuilt only when a set changes)."""
        fresh = frozenset(self.decoder.image(i) for i in images)
        if self.prepared.get(node) != fresh:
            self.prepared[node] = fresh
            self.prepared_version += 1

    def note_incoming(self, node: str, image: str, until: float) -> None:
        """A pod placed on ``node`` will pull ``image`` (absent there now), until ``until``."""
        self.incoming.setdefault(node, {})[image] = until
        self.incoming_nodes.setdefault(image, set()).add(node)
        heapq.heappush(self._incoming_due, (until, node, image))
        if len(self._incoming_due) > self._incoming_compact_at:
            self._incoming_due = [
                (t, n, i) for n, images in self.incoming.items() for i, t in images.items()
            ]
            heapq.heapify(self._incoming_due)
            self._incoming_compact_at = max(1024, 2 * len(self._incoming_due))

    def incoming_state(self) -> IncomingState:
        """A copy of the expected pulls, for :meth:`restore_incoming` (a dry run's undo)."""
        return (
            {node: dict(images) for node, images in self.incoming.items()},
            {image: set(nodes) for image, nodes in self.incoming_nodes.items()},
            list(self._incoming_due),
            self._incoming_compact_at,
        )

    def restore_incoming(self, state: IncomingState) -> None:
        self.incoming, self.incoming_nodes, self._incoming_due, self._incoming_compact_at = state

    def pulls_pending(self, node: str) -> int:
        """Distinct images pods placed on ``node`` are (probably) pulling."""
        return len(self.incoming.get(node, ()))

    def _expire_incoming(self, now: float) -> None:
        heap, examined = self._incoming_due, 0
        while heap and heap[0][0] <= now:
            until, node, image = heapq.heappop(heap)
            examined += 1
            images = self.incoming.get(node)
            if images is None or images.get(image) != until:
                continue  # noted again later, node gone, or a dry run's (engine.plan)
            del images[image]
            nodes = self.incoming_nodes.get(image)
            if nodes is not None:
                nodes.discard(node)
                if not nodes:
                    del self.incoming_nodes[image]
            if not images:
                del self.incoming[node]
        self.incoming_examined = examined

    def images_on(self, node: NodeInfo) -> Collection[str]:
        """Images present (node.status.images) or prepared (node agent) on ``node``."""
        prepared = self.prepared.get(node.name)
        return _Either(node.images, prepared) if prepared else node.images

    # -- pods --------------------------------------------------------------------------
    def upsert_pod(self, pod: Pod | Mapping[str, Any]) -> None:
        """Apply an add/update of a pod: move its contribution to match its new state.

        A pod observed bound while it is in the assumed ledger confirms the reservation.
        """
        if isinstance(pod, Pod):
            uid, node, req, counts = pod.uid, pod.node_name, pod.shape.requests, pod.counts
            starting = pod.starting
        else:
            uid, node, req, counts, starting = self.decoder.bound(pod)
        if node is not None and uid in self.ledger:
            # Confirm: the observed pod replaces its reservation.
            self._release(uid)
        old = self._held.get(uid)
        new = (node, req, starting) if counts and node is not None else None
        if old == new:
            return
        if old is not None:
            self._usage(old[0]).add(old[1], -1, old[2])
            del self._held[uid]
        if new is not None:
            self._usage(new[0]).add(req, 1, starting)
            self._held[uid] = new

    def delete_pod(self, pod: Pod | Mapping[str, Any] | str) -> None:
        """Apply a pod deletion (by object or uid); also drops any reservation."""
        if isinstance(pod, str):
            uid = pod
        elif isinstance(pod, Pod):
            uid = pod.uid
        else:
            meta = pod.get("metadata") or {}
            uid = meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        self._release(uid)
        self.decoder.forget(uid)
        old = self._held.pop(uid, None)
        if old is not None:
            self._usage(old[0]).add(old[1], -1, old[2])

    def apply(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply a watch event (``kind`` "Node" or "Pod"; type ADDED/MODIFIED/DELETED).

        BOOKMARK and ERROR events carry no object change; the informer handles them, and
        passing one here is a caller bug, reported as ValueError.
        """
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            raise ValueError(f"unsupported event type {event_type!r}")
        if kind == "Node":
            if event_type == "DELETED":
                self.delete_node(obj["metadata"]["name"])
            else:
                self.upsert_node(obj)
        elif kind == "Pod":
            if event_type == "DELETED":
                self.delete_pod(obj)
            else:
                self.upsert_pod(obj)
        else:
            raise ValueError(f"unsupported kind {kind!r}")

    # -- the assumed ledger --------------------------------------------------------------
    def reserve(self, uid: str, node: str, requests: Resources, deadline: float) -> None:
        """Take capacity on ``node`` for ``uid`` until confirmed, forgotten or expired."""
        self.reserve_many((uid,), node, requests, deadline)

    def reserve_many(
        self,
        uids: Iterable[str],
        node: str,
        requests: Resources,
        deadline: float,
        *,
        check: bool = True,
    ) -> None:
        """Reserve identical pods on one node (the planner's bulk path).

        ``check=False`` skips the duplicate checks, for callers (the planner) that have
        already excluded placed, reserved and repeated uids.
        """
        batch = tuple(uids)
        if check:
            if self.ledger.overlaps(batch) or not self._held.keys().isdisjoint(batch):
                raise ValueError(f"a pod of {batch[:3]}... is already placed or reserved")
            if len(set(batch)) != len(batch):
                raise ValueError("duplicate pod uid in one reservation")
        self.ledger.add(batch, Reservation(node, requests, deadline))
        usage = self._usage(node)
        usage.add(requests, len(batch), True)
        usage.assumed += len(batch)

    def extend(self, uids: Iterable[str], deadline: float) -> int:
        """Move the deadline of the reservations of ``uids`` (unknown uids are ignored);
        returns how many were reserved."""
        groups: dict[int, tuple[Reservation, list[str]]] = {}
        for uid in uids:
            r = self.ledger.get(uid)
            if r is not None:
                groups.setdefault(id(r), (r, []))[1].append(uid)
        for r, members in groups.values():
            self.ledger.add(tuple(members), Reservation(r.node, r.requests, deadline))
        return sum(len(members) for _, members in groups.values())

    def forget(self, uid: str) -> bool:
        """Drop the reservation for ``uid`` (bind failed). Idempotent; True if one existed."""
        return self._release(uid) is not None

    def expire(self, now: float) -> list[str]:
        """Forget reservations whose deadline passed (and expected pulls past theirs);
        returns the uids."""
        self._expire_incoming(now)
        expired = self.ledger.due(now)
        for _, r in expired:
            self._unapply(r)
        return [uid for uid, _ in expired]

    def _release(self, uid: str) -> Reservation | None:
        r = self.ledger.pop(uid)
        if r is not None:
            self._unapply(r)
        return r

    def _unapply(self, r: Reservation) -> None:
        usage = self._usage(r.node)
        usage.add(r.requests, -1, True)
        usage.assumed -= 1

    # -- queries -----------------------------------------------------------------------
    def _usage(self, node: str) -> NodeUsage:
        usage = self.usage.get(node)
        if usage is None:
            usage = self.usage[node] = NodeUsage()
        return usage

    def usage_of(self, node: str) -> UsageSnapshot:
        return self._usage(node).snapshot()

    def held_pods(self) -> int:
        """Number of pods currently counted against some node."""
        return len(self._held)

    def snapshot(self) -> dict[str, UsageSnapshot]:
        """Usage of every node with any usage or any node object."""
        names = set(self.usage) | set(self.nodes)
        return {n: self.usage.get(n, NodeUsage()).snapshot() for n in sorted(names)}

    def placed_uids(self) -> tuple[Container[str], Container[str]]:
        """Uids counted on a node, and uids reserved in the ledger (read-only views)."""
        return self._held.keys(), self.ledger.uids()
