"""The controller's view of the cluster: three informers feeding the placement engine.

- **nodes**: every Node (capacity, taints, conditions);
- **bound pods**: every pod with ``spec.nodeName`` set, whoever owns it — the cluster is
  shared, so other tenants' pods take capacity too;
- **pending sandboxes**: pods with ``schedulerName: sandman`` and no node yet;
- **owner leases**: Leases labelled ``sandman.io/owner`` that trainers renew for their run
  (the garbage collector deletes an owner's sandboxes when its Lease expires);
- **agent leases**: the node agents' per-node Leases (``sandman.io/node-agent``): which
  images are ready on each node — all of them, where ``node.status.images`` lists only the
  50 largest — fed to the scheduler's image locality, and read by the preparation
  decisions (controller/image_preparer.py, docs/node-agent.md).

Node and bound-pod events go straight into the :class:`scheduler.Scheduler`'s capacity
model (O(1) each); a bound pod event also confirms the planner's reservation for it. The
view runs on standbys too, so a new leader starts with warm caches and an exact model.
Listeners hear about changes that may free capacity (node added/changed, a pod gone or
finished) so unschedulable sandboxes are retried only then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from kube import LEASES, NODES, PODS, KubeClient
from kube.cache import Obj
from kube.contract import LABEL_OWNER, SCHEDULER_NAME
from kube.informer import Handlers, Informer, InformerSettings
from kube.preparation_contract import (
    AGENT_LEASE_NAMESPACE,
    ANNOTATION_READY,
    LABEL_NODE_AGENT,
    decode_images,
)
from sandman.base.settings import fixed, part, setting
from scheduler import Scheduler

__all__ = ["ClusterView", "ViewSettings"]

_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class ViewSettings:
    scheduler_name: str = setting(SCHEDULER_NAME, help="pods with this spec.schedulerName are ours")
    namespace: str | None = setting(
        None, help="watch (and bind) sandboxes of this namespace only; none: all namespaces"
    )
    informer: InformerSettings = part(InformerSettings, help="the list-and-watch of every cache")
    server_side_unbound: bool = setting(
        True,
        help="ask the server for unbound pods only (spec.nodeName=, as kube-scheduler does); "
        "off: watch every sandbox and drop bound ones here, for an API server that cannot "
        "select an empty spec.nodeName in a watch (simcluster today; every sandbox event "
        "then arrives twice)",
    )
    owner_label: str = fixed(
        LABEL_OWNER,
        why="the contract's label on trainer-owned Leases and their sandboxes (kube/contract.py)",
    )
    agent_namespace: str | None = setting(
        AGENT_LEASE_NAMESPACE,
        help="where the node agents' Leases are (only there: a Lease with the agents' label "
        "in a tenant's namespace is no node's); none: any namespace",
    )


def _unbound(pod: Obj) -> bool:
    return not (pod.get("spec") or {}).get("nodeName")


def _node_capacity_view(node: Obj) -> tuple[object, ...]:
    """The parts of a Node that change what fits on it (heartbeats excluded)."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    conditions = tuple(
        (c.get("type"), c.get("status")) for c in status.get("conditions") or () if c
    )
    return (repr(spec), repr(status.get("allocatable")), conditions)


class ClusterView:
    def __init__(
        self,
        client: KubeClient,
        scheduler: Scheduler,
        settings: ViewSettings | None = None,
    ) -> None:
        self.settings = s = settings or ViewSettings()
        self.scheduler = scheduler
        self.nodes = Informer(client, NODES, settings=s.informer, name="nodes")
        self.bound = Informer(
            client, PODS, field_selector="spec.nodeName!=", settings=s.informer, name="bound-pods"
        )
        pending_selector = f"spec.schedulerName={s.scheduler_name}"
        if s.server_side_unbound:
            pending_selector += ",spec.nodeName="
        self.pending = Informer(
            client,
            PODS,
            namespace=s.namespace,
            field_selector=pending_selector,
            keep=None if s.server_side_unbound else _unbound,
            settings=s.informer,
            name="pending-pods",
        )
        self.owner_leases = Informer(
            client,
            LEASES,
            namespace=s.namespace,
            label_selector=s.owner_label,
            settings=s.informer,
            name="owner-leases",
        )
        self.agent_leases = Informer(
            client,
            LEASES,
            namespace=s.agent_namespace,
            label_selector=f"{LABEL_NODE_AGENT}=true",
            settings=s.informer,
            name="agent-leases",
        )
        self.agent_leases.add_handler(
            Handlers(
                add=self._agent_lease,
                update=lambda _old, new: self._agent_lease(new),
                delete=self._agent_lease_gone,
            )
        )
        self._capacity_listeners: list[Callable[[], None]] = []
        self.nodes.add_handler(
            Handlers(add=self._node_added, update=self._node_updated, delete=self._node_deleted)
        )
        self.bound.add_handler(
            Handlers(add=self._pod_upsert, update=self._pod_updated, delete=self._pod_deleted)
        )

    def informers(self) -> tuple[Informer, ...]:
        return (self.nodes, self.bound, self.pending, self.owner_leases, self.agent_leases)

    def on_capacity(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` when capacity may have appeared."""
        self._capacity_listeners.append(listener)

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers())

    def forbidden(self) -> str:
        """``<informer>: <Forbidden message>`` of the first informer refused a list or
        watch with 403 (its cache stale until the rule is back); "" if none is."""
        for informer in self.informers():
            if informer.forbidden is not None:
                return f"{informer.name}: {informer.forbidden}"
        return ""

    async def wait_synced(self) -> None:
        for informer in self.informers():
            await informer.wait_synced()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for informer in self.informers():
                tg.create_task(informer.run())

    # --- handlers -----------------------------------------------------------------------
    def _capacity_changed(self) -> None:
        for listener in self._capacity_listeners:
            listener()

    def _node_added(self, node: Obj) -> None:
        self.scheduler.apply("Node", "ADDED", node)
        self._capacity_changed()

    def _node_updated(self, old: Obj, new: Obj) -> None:
        self.scheduler.apply("Node", "MODIFIED", new)
        if _node_capacity_view(old) != _node_capacity_view(new):
            self._capacity_changed()

    def _node_deleted(self, node: Obj) -> None:
        self.scheduler.apply("Node", "DELETED", node)

    def _agent_lease(self, lease: Obj) -> None:
        node = (lease.get("spec") or {}).get("holderIdentity")
        if node:
            annotations = (lease.get("metadata") or {}).get("annotations") or {}
            self.scheduler.set_prepared_images(
                node, decode_images(annotations.get(ANNOTATION_READY))
            )

    def _agent_lease_gone(self, lease: Obj) -> None:
        node = (lease.get("spec") or {}).get("holderIdentity")
        if node:
            self.scheduler.set_prepared_images(node, ())

    def _pod_upsert(self, pod: Obj) -> None:
        self.scheduler.apply("Pod", "ADDED", pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self.scheduler.apply("Pod", "MODIFIED", new)
        was = (old.get("status") or {}).get("phase")
        now = (new.get("status") or {}).get("phase")
        if now in _TERMINAL and was not in _TERMINAL:
            self._capacity_changed()

    def _pod_deleted(self, pod: Obj) -> None:
        self.scheduler.apply("Pod", "DELETED", pod)
        self._capacity_changed()
