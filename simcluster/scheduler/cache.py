"""The scheduler's view of the cluster, kept by a store listener: nodes with what is bound
to them, and the pending pods it owns.

Why a listener and not a watch: kube-scheduler's informers cost the real API server one
encoded event per watcher, but here the scheduler shares the server's event loop, so a watch
of every pod would charge the simulated API server for a JSON decode of every pod event of a
burst (Sandman's own pods included) that a real cluster pays elsewhere. The listener reads
each event in place (never keeping or changing the stored object beyond the pending pods'
latest version, which the store replaces rather than mutates), and does O(1) work per event.
Writes never happen here: they go through the API (``scheduler.py``).

A pod counts on its node from the moment it is bound (or assumed: the scheduler's own bind
in flight) until it is terminal (Succeeded/Failed) or gone, as upstream's scheduler cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simcluster.apiserver.pods import pod_requests
from simcluster.apiserver.store import Event, Store
from simcluster.errors import SimclusterError
from simcluster.quantity import to_milli, to_units
from simcluster.scheduler.framework import (
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    NodeInfo,
    PodInfo,
)
from simcluster.scheduler.queue import PodKey
from simcluster.scheduler.settings import DEFAULT_SCHEDULER_NAME

__all__ = ["ClusterCache", "PodKey", "node_info", "pod_info"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
PODS, NODES = "/pods", "/nodes"
TERMINAL = ("Succeeded", "Failed")


def _ready_taint(status: Obj, taints: tuple[Obj, ...]) -> tuple[Obj, ...]:
    """The taint the node lifecycle controller gives a node that is not Ready (Ready False:
    not-ready, Unknown or no condition: unreachable), unless the node already carries it."""
    ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    state = (ready or {}).get("status", "Unknown")
    if state == "True":
        return taints
    key = NOT_READY_TAINT if state == "False" else UNREACHABLE_TAINT
    if any(t.get("key") == key for t in taints):
        return taints
    return (*taints, {"key": key, "effect": "NoSchedule"})


def node_info(node: Obj) -> NodeInfo:
    """A Node object as the filters read it (nothing bound yet)."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    taints = tuple(t for t in spec.get("taints") or () if isinstance(t, Mapping))
    return NodeInfo(
        name=node["metadata"]["name"],
        allocatable_cpu_milli=to_milli(alloc.get("cpu", 0)),
        allocatable_memory=to_units(alloc.get("memory", 0)),
        allocatable_pods=to_units(alloc.get("pods", 0)),
        labels=dict(node["metadata"].get("labels") or {}),
        taints=_ready_taint(status, taints),
        unschedulable=bool(spec.get("unschedulable")),
    )


def pod_info(pod: Obj) -> PodInfo:
    """A pending pod as the filters read it (``BadRequest`` for requests that do not parse)."""
    spec = pod.get("spec") or {}
    cpu, memory = requests_of(pod)
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or ()
    return PodInfo(
        namespace=pod["metadata"]["namespace"],
        name=pod["metadata"]["name"],
        cpu_milli=cpu,
        memory=memory,
        node_selector=dict(spec.get("nodeSelector") or {}),
        required_terms=tuple(required),
        tolerations=tuple(spec.get("tolerations") or ()),
    )


_MEMO: dict[Any, tuple[int, int]] = {}
_MEMO_MAX = 4096


def requests_of(pod: Obj) -> tuple[int, int]:
    """``pod_requests`` memoised on the requests' text: parsing a quantity costs ~0.1 ms, and
    a burst's pods all ask for the same few (the listener sees every bound pod once). Only
    string quantities are memoised (1, 1.0 and True hash alike but do not parse alike)."""
    spec = pod.get("spec") or {}
    key = tuple(
        (kind, tuple(sorted(((c.get("resources") or {}).get("requests") or {}).items())))
        for kind in ("containers", "initContainers")
        for c in spec.get(kind) or ()
        if isinstance(c, Mapping)
    )
    if not all(isinstance(v, str) for _, items in key for _, v in items):
        return pod_requests(dict(pod))
    value = _MEMO.get(key)
    if value is None:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        _MEMO[key] = value = pod_requests(dict(pod))
    return value


def _ours(spec: Obj) -> bool:
    return (spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME) == DEFAULT_SCHEDULER_NAME


@dataclass(slots=True)
class _Bound:
    node: str
    cpu: int
    memory: int


@dataclass
class ClusterCache:
    """Fed by ``handle`` (a store listener); tells ``on_pending``/``on_change`` what moved."""

    #: Called with a pod key when a pod of ours is pending: new, or its spec changed.
    on_pending: Callable[[PodKey], None]
    #: Called when a pod of ours left the pending set (bound, deleted, no longer ours).
    on_gone: Callable[[PodKey], None]
    #: Called when something changed that may let an unschedulable pod fit now.
    on_change: Callable[[], None]
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    pending: dict[PodKey, Obj] = field(default_factory=dict)
    _bound: dict[str, _Bound] = field(default_factory=dict)
    _node_seen: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def sync(self, store: Store) -> None:
        """Start from what the store holds now (the listener then sees every change)."""
        for node in list(store.iter(NODES)):
            self._node("ADDED", node)
        for pod in list(store.iter(PODS)):
            self._pod("ADDED", pod, None)

    def handle(self, event: Event) -> None:
        if event.key == PODS:
            self._pod(event.type, event.obj, event.old)
        elif event.key == NODES:
            self._node(event.type, event.obj)

    # --- nodes ------------------------------------------------------------------------
    def _node(self, etype: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        if etype == "DELETED":
            self.nodes.pop(name, None)
            self._node_seen.pop(name, None)
            return
        try:
            fresh = node_info(node)
        except SimclusterError as e:
            log.warning("scheduler: node %s: %s", name, e)
            return
        seen = (
            fresh.allocatable_cpu_milli, fresh.allocatable_memory, fresh.allocatable_pods,
            tuple(sorted(fresh.labels.items())), repr(fresh.taints), fresh.unschedulable,
        )  # fmt: skip
        old = self.nodes.get(name)
        if old is not None:  # what is bound there stays counted
            fresh.requested_cpu_milli, fresh.requested_memory = (
                old.requested_cpu_milli,
                old.requested_memory,
            )
            fresh.pods, fresh.nonzero_cpu_milli = old.pods, old.nonzero_cpu_milli
            fresh.nonzero_memory = old.nonzero_memory
        else:
            for b in self._bound.values():
                if b.node == name:
                    fresh.add(b.cpu, b.memory)
        self.nodes[name] = fresh
        if self._node_seen.get(name) != seen:
            self._node_seen[name] = seen
            self.on_change()

    # --- pods -------------------------------------------------------------------------
    def _pod(self, etype: str, pod: Obj, old: Obj | None) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        node = spec.get("nodeName")
        if etype != "DELETED" and node and phase not in TERMINAL:
            self._account(meta["uid"], node, pod)
        elif self.forget(meta["uid"]):
            self.on_change()
        key = (meta["namespace"], meta["name"])
        waiting = not node and phase not in TERMINAL and not meta.get("deletionTimestamp")
        if etype != "DELETED" and waiting and _ours(spec):
            if key not in self.pending or _respec(pod, old):
                self.pending[key] = pod
                self.on_pending(key)
            else:
                self.pending[key] = pod
        elif self.pending.pop(key, None) is not None:
            self.on_gone(key)

    def _account(self, uid: str, node: str, pod: Obj) -> None:
        bound = self._bound.get(uid)
        if bound is not None and bound.node == node:
            return
        self.forget(uid)
        try:
            cpu, memory = requests_of(pod)
        except SimclusterError:  # the kubelet fails such a pod; it holds nothing
            cpu = memory = 0
        self.assume(uid, node, cpu, memory)

    def assume(self, uid: str, node: str, cpu: int, memory: int) -> None:
        """Count a pod on ``node`` (bound, or about to be bound by the scheduler)."""
        self._bound[uid] = _Bound(node, cpu, memory)
        info = self.nodes.get(node)
        if info is not None:
            info.add(cpu, memory)

    def forget(self, uid: str) -> bool:
        """Stop counting a pod (terminal, deleted, or its bind failed); whether it counted."""
        bound = self._bound.pop(uid, None)
        if bound is None:
            return False
        info = self.nodes.get(bound.node)
        if info is not None:
            info.add(bound.cpu, bound.memory, -1)
        return True


def _respec(pod: Obj, old: Obj | None) -> bool:
    """A pending pod worth another attempt: its spec or labels changed (a status write, such
    as the scheduler's own PodScheduled condition, is not)."""
    if old is None:
        return True
    return pod.get("spec") != old.get("spec") or (pod["metadata"].get("labels")) != (
        old["metadata"].get("labels")
    )
