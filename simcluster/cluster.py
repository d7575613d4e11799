"""A whole simulated cluster: the API server, one kubelet per node, other tenants' pods and
the node-level fault handlers behind ``POST /admin/faults``.

Kubelets talk to the server in-process (``LocalClient``) as ``system:node:<name>`` so their
traffic is flow-controlled and counted like real node traffic, in its own priority level.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from simcluster.apiserver.auth import User, service_account_user
from simcluster.apiserver.http import ApiServer, ServerSettings
from simcluster.apiserver.local import LocalApiError, LocalClient
from simcluster.errors import BadRequest, NotFound, SimclusterError
from simcluster.kubelet.cri import CriServers
from simcluster.kubelet.cri_runtime import CriRuntime, CriRuntimeSettings
from simcluster.kubelet.images import PullStats
from simcluster.kubelet.kubelet import VIRTUAL_LABEL, Kubelet
from simcluster.kubelet.metrics import KubeletMetrics
from simcluster.kubelet.process import ProcessRuntime, ProcessSettings
from simcluster.kubelet.runtime import Runtime, VirtualRuntime
from simcluster.kubelet.settings import NodeSettings
from simcluster.kubelet.stand_in import StandInRuntime, raise_open_file_limit
from simcluster.kubelet.streaming import KubeletStreams
from simcluster.network import PodNetwork
from simcluster.pools import NodePool, PlannedNode, node_plan
from simcluster.quantity import format_cpu, format_memory, to_milli, to_units
from simcluster.scheduler import SCHEDULER_USER, DefaultScheduler, SchedulerSettings

__all__ = ["ADMIN", "RUNTIME_LABEL", "Cluster", "ClusterSettings"]

ADMIN = User("admin", ("system:masters",))
TENANTS_NS = "simcluster-tenants"
RUNTIME_LABEL = "simcluster.io/runtime"  # "process" on the process nodes of a virtual cluster
TENANT_IMAGE = "registry.example/other-tenant:1"  # preloaded on every node
Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    server: ServerSettings = field(default_factory=ServerSettings)
    nodes: int = 0
    node: NodeSettings = field(default_factory=NodeSettings)
    runtime: str = "virtual"  # "virtual" | "process" | "cri"
    #: With the virtual runtime: this many nodes (the first) run the process runtime
    #: instead, labelled and tainted (NoSchedule) ``simcluster.io/runtime=process``: a few
    #: real pods (a node selector and a toleration pick them; nothing else lands there) in
    #: a cluster too large to run real processes on every node.
    process_nodes: int = 0
    foreign_fraction: float = 0.0  # share of each node's CPU/memory held by other tenants' pods
    node_prefix: str = "node-"
    seed: int = 0
    # extra kubeconfigs to write: file name -> "namespace/serviceaccount"
    service_account_kubeconfigs: tuple[tuple[str, str], ...] = ()
    #: Namespaces that exist from the start (as an operator's would), beside those of the
    #: service accounts above.
    namespaces: tuple[str, ...] = ()
    #: Serve the CRI ImageService of every node on a unix socket (kubelet/cri.py).
    cri: bool = False
    #: The ``cri`` runtime's containerd socket (CRI RuntimeService and ImageService). Every
    #: node's pods run there, and ``cri-sockets.json`` points every node's agent at it.
    cri_socket: str = ""
    #: Several node shapes (simcluster/pools.py), whose counts add up to ``nodes``; empty:
    #: one unnamed pool of ``nodes`` nodes of ``node`` holding ``foreign_fraction`` of each node.
    pools: tuple[NodePool, ...] = ()
    #: The process runtime's binds into every pod (``ProcessSettings.binds``):
    #: ``(path in the sandbox, host path)``, read-only.
    process_binds: tuple[tuple[str, str], ...] = ()
    #: The default scheduler (simcluster/scheduler/): binds pods of ``default-scheduler``.
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)

    def __post_init__(self) -> None:
        if self.pools and sum(p.count for p in self.pools) != self.nodes:
            counts = " + ".join(str(p.count) for p in self.pools)
            raise SimclusterError(f"nodes={self.nodes} but the pools hold {counts}")

    def node_pools(self) -> tuple[NodePool, ...]:
        if self.pools:
            return self.pools
        return (NodePool("", self.nodes, self.node, self.foreign_fraction),)

    def node_plan(self) -> list[PlannedNode]:
        """The nodes ``start`` creates, in order (other tenants' image preloaded as needed)."""
        return node_plan(self.node_pools(), self.seed, TENANT_IMAGE)


RUNTIMES = ("virtual", "process", "cri")


def _process_settings(settings: ClusterSettings, workdir: Path) -> ProcessSettings:
    return ProcessSettings(workdir / "logs", binds=settings.process_binds)


class Cluster:
    def __init__(self, settings: ClusterSettings, workdir: Path) -> None:
        if settings.runtime not in RUNTIMES:
            raise SimclusterError(f"unknown runtime {settings.runtime!r} ({', '.join(RUNTIMES)})")
        if settings.runtime == "cri" and not settings.cri_socket:
            raise SimclusterError("the cri runtime needs cri_socket (containerd's socket)")
        self.settings = settings
        #: The profile's nodes in order; a node added beyond them (``add_nodes`` later) is
        #: one more node of the last pool, without other tenants (they are placed at start).
        self.plan = settings.node_plan()
        #: Node name -> the share of it other tenants hold (0: no tenant pod there).
        self.foreign: dict[str, float] = {}
        self.workdir = workdir
        self.server = ApiServer(settings.server)
        self.kubelets: dict[str, Kubelet] = {}
        # pods/log?follow, pods/exec, pods/attach reach the pod's kubelet
        self.server.pod_streams = KubeletStreams(self.kubelets)
        self.kubelet_metrics = KubeletMetrics(self.server.metrics.registry)
        self.runtime: Runtime = self._runtime(settings, workdir)
        #: The runtime of the first ``process_nodes`` nodes of a virtual cluster.
        self.process_runtime: ProcessRuntime | None = None
        if isinstance(self.runtime, ProcessRuntime):
            self.process_runtime = self.runtime
        elif settings.process_nodes > 0 and settings.runtime == "virtual":
            self.process_runtime = ProcessRuntime(_process_settings(settings, workdir))
        self.pull_stats = PullStats(
            self.kubelet_metrics.pull_started, self.kubelet_metrics.gc_removed.inc
        )
        # With real containerd the agents use its ImageService, not the simulated one.
        self.cri: CriServers | None = (
            CriServers(workdir) if settings.cri and settings.runtime != "cri" else None
        )
        if isinstance(self.runtime, CriRuntime):
            self.server.dispatcher.log_reader = self.runtime.read_log
        elif self.process_runtime is not None:
            self.server.dispatcher.log_reader = self.process_runtime.read_log
        # Process-mode pods listen on loopback addresses: reserve a range no other cluster
        # on this machine uses (virtual pods listen nowhere and share the default range).
        self.network = PodNetwork(settings.nodes)
        #: The stand-in daemons of nodes with ``virtual_daemon`` (kubelet/stand_in.py).
        self.stand_in: StandInRuntime | None = None
        self.kubeconfig = workdir / "kubeconfig"
        self.kubeconfigs: dict[str, Path] = {}
        self._admin = LocalClient(self.server.dispatcher, ADMIN)
        self.scheduler: DefaultScheduler | None = None
        if settings.scheduler.enabled:
            client = LocalClient(self.server.dispatcher, SCHEDULER_USER)
            self.scheduler = DefaultScheduler(settings.scheduler, self.server.store, client)

    def _runtime(self, settings: ClusterSettings, workdir: Path) -> Runtime:
        if settings.runtime == "process":
            return ProcessRuntime(_process_settings(settings, workdir))
        if settings.runtime == "cri":
            on_pull = self.kubelet_metrics.cri_pulls.labels
            return CriRuntime(
                CriRuntimeSettings(
                    settings.cri_socket,
                    workdir / "logs",
                    pod_pids_limit=settings.node.pod_pids_limit,
                ),
                on_pull=lambda image: on_pull(image).inc(),
            )
        return VirtualRuntime()

    async def start(self, progress: Progress | None = None) -> None:
        say = progress or (lambda _msg: None)
        stand_ins = self._stand_in_pods()
        if self.runtime.name != "virtual" or self.process_runtime is not None or stand_ins:
            self.network.reserve()
        if stand_ins:
            raise_open_file_limit(stand_ins + 1024)
        if self.process_runtime is not None:
            for fd in self.network.lock_fds:
                self.process_runtime.inherit(fd)
        await self.server.start()
        self.server.kubeconfig(self.kubeconfig, ADMIN)
        for ns in self.settings.namespaces:
            await self._ensure_namespace(ns)
        for fname, sa in self.settings.service_account_kubeconfigs:
            ns, _, name = sa.partition("/")
            await self._ensure_namespace(ns)
            await self._ensure(("serviceaccounts", ns, {"metadata": {"name": name}}))
            self.kubeconfigs[fname] = self.server.kubeconfig(
                self.workdir / fname, service_account_user(ns, name)
            )
        say(f"API server at {self.server.url}")
        if self.scheduler is not None:
            await self.scheduler.start()
            say("default scheduler: on (binds pods of default-scheduler; Sandman's are its own)")
        await self.add_nodes(self.settings.nodes, progress)
        if any(self.foreign.values()):
            await self._foreign_pods(say)
        for kind, handler in (
            ("node-not-ready", self._fault_not_ready),
            ("node-delete", self._fault_delete_node),
            ("kubelet-pause", self._fault_pause),
            ("evict", self._fault_evict),
            ("pull-fail", self._fault_pull_fail),
        ):
            self.server.admin_handlers[kind] = handler

    async def add_nodes(self, count: int, progress: Progress | None = None) -> None:
        start = len(self.kubelets)
        batch = 50
        for first in range(start, start + count, batch):
            new = []
            for i in range(first, min(first + batch, start + count)):
                name = f"{self.settings.node_prefix}{i}"
                client = LocalClient(
                    self.server.dispatcher, User(f"system:node:{name}", ("system:nodes",))
                )
                planned = self._planned(i)
                if planned is not None and planned.foreign_fraction > 0:
                    self.foreign[name] = planned.foreign_fraction
                runtime, node = self._runtime_of(i, planned)
                k = Kubelet(
                    name,
                    i,
                    client,
                    runtime,
                    node,
                    self.settings.seed,
                    self.kubelet_metrics,
                    network=self.network.first,
                    pull_stats=self.pull_stats,
                )
                self.kubelets[name] = k
                new.append(k)
            await asyncio.gather(*(k.start() for k in new))
            if self.cri is not None:
                for k in new:
                    await self.cri.add(k.name, k.images)
                self.cri.write_index()
            elif self.settings.runtime == "cri":
                self._write_cri_index()
            if progress is not None:
                progress(f"nodes ready: {len(self.kubelets)}/{start + count}")

    def _planned(self, i: int) -> PlannedNode | None:
        if i < len(self.plan):
            return self.plan[i]
        return replace(self.plan[-1], foreign_fraction=0.0) if self.plan else None

    def _runtime_of(self, i: int, planned: PlannedNode | None) -> tuple[Runtime, NodeSettings]:
        node = planned.node if planned is not None else self.settings.node
        if self.process_runtime is None or self.process_runtime is self.runtime:
            return self._virtual_of(node), node
        if i >= self.settings.process_nodes:
            return self._virtual_of(node), node
        labels = {**node.labels, RUNTIME_LABEL: "process"}
        taint = {"key": RUNTIME_LABEL, "value": "process", "effect": "NoSchedule"}
        return self.process_runtime, replace(node, labels=labels, taints=(*node.taints, taint))

    def _stand_in_pods(self) -> int:
        """How many stand-in daemons the profile's nodes could hold at once (their pod
        capacity): they listen on the pod network, so it is reserved, and each holds a file."""
        if not isinstance(self.runtime, VirtualRuntime):
            return 0
        nodes = [self._planned(i) for i in range(self.settings.nodes)]
        settings = [p.node if p is not None else self.settings.node for p in nodes]
        return sum(n.max_pods for n in settings if n.virtual_daemon)

    def _virtual_of(self, node: NodeSettings) -> Runtime:
        """The stand-in daemons' runtime for a virtual node with ``virtual_daemon`` on."""
        if not node.virtual_daemon or not isinstance(self.runtime, VirtualRuntime):
            return self.runtime
        if self.stand_in is None:
            self.stand_in = StandInRuntime()
        return self.stand_in

    def _write_cri_index(self) -> None:
        """``cri-sockets.json`` as the simulated CRI writes it: every node -> containerd."""
        index = self.workdir / "cri-sockets.json"
        tmp = index.with_suffix(".tmp")
        tmp.write_text(json.dumps({n: self.settings.cri_socket for n in sorted(self.kubelets)}))
        tmp.replace(index)

    async def stop(self) -> None:
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self.cri is not None:
            await self.cri.close()
        await asyncio.gather(*(k.stop() for k in self.kubelets.values()))
        self.kubelets.clear()
        await self.runtime.close()
        if self.stand_in is not None:
            await self.stand_in.close()
        if self.process_runtime is not None and self.process_runtime is not self.runtime:
            await self.process_runtime.close()
        await self.server.stop()
        self.network.release()

    # --- helpers -------------------------------------------------------------------------
    async def _ensure(self, spec: tuple[str, str, dict[str, Any]]) -> None:
        resource, ns, body = spec
        try:
            await self._admin.request("create", resource, namespace=ns or None, body=body)
        except LocalApiError as e:
            if e.code != 409:
                raise

    async def _ensure_namespace(self, ns: str) -> None:
        await self._ensure(("namespaces", "", {"metadata": {"name": ns}}))

    async def _foreign_pods(self, say: Progress) -> None:
        """One pod per node from another tenant, holding that node's foreign share of it."""
        await self._ensure_namespace(TENANTS_NS)
        for name, f in self.foreign.items():
            if name in self.kubelets:
                await self._ensure(("pods", TENANTS_NS, self._tenant_pod(name, f)))
        total = len(self.foreign)
        while (running := self._tenants_running()) < total:
            say(f"other tenants' pods running: {running}/{total}")
            await asyncio.sleep(1.0)
        for pool in self.settings.node_pools():
            if pool.foreign_fraction > 0:
                share = f"{pool.foreign_fraction:.0%}"
                if pool.foreign_spread:
                    share += f" ± {pool.foreign_spread:.0%}"
                where = f"pool {pool.name}" if pool.name else "every node"
                say(f"other tenants hold {share} of {where} ({self._share_text(pool)})")

    def _tenant_pod(self, name: str, f: float) -> dict[str, Any]:
        """Another tenant's pod, bound by name (no scheduler) and tolerating every taint, as
        the workloads that own a node pool do."""
        node = self.kubelets[name].settings
        cpu, mem = _share(node, f)
        return {
            "metadata": {
                "name": f"tenant-{name}",
                "labels": {VIRTUAL_LABEL: "true", "app": "other-tenant"},
            },
            "spec": {
                "nodeName": name,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "work",
                        "image": TENANT_IMAGE,
                        "resources": {"requests": {"cpu": cpu, "memory": mem}},
                    }
                ],
            },
        }

    @staticmethod
    def _share_text(pool: NodePool) -> str:
        cpu, mem = _share(pool.node, pool.foreign_fraction)
        return f"{cpu} CPU, {mem}" + (" per node on average" if pool.foreign_spread else "")

    def _tenants_running(self) -> int:
        pods = self.server.store.iter("/pods", TENANTS_NS)
        return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")

    def _kubelet(self, body: dict[str, Any]) -> Kubelet:
        name = str(body.get("node", ""))
        if name not in self.kubelets:
            raise NotFound.for_object("nodes", "", name)
        return self.kubelets[name]

    # --- node faults ---------------------------------------------------------------------
    async def _fault_not_ready(self, body: dict[str, Any]) -> dict[str, Any]:
        k = self._kubelet(body)
        k.not_ready = not bool(body.get("ready", False))
        await k.post_node_status(force=True)
        taint = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
        node = await self._admin.request("get", "nodes", name=k.name)
        taints = [
            t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != taint["key"]
        ]
        if k.not_ready:
            taints.append(taint)
        await self._admin.request(
            "patch",
            "nodes",
            name=k.name,
            body={"spec": {"taints": taints}},
            content_type="application/merge-patch+json",
        )
        return {"node": k.name, "ready": not k.not_ready}

    async def _fault_delete_node(self, body: dict[str, Any]) -> dict[str, Any]:
        k = self._kubelet(body)
        del self.kubelets[k.name]
        if self.cri is not None:
            await self.cri.remove(k.name)
        await k.stop()
        await self._admin.request("delete", "nodes", name=k.name)
        pods = await self._admin.request(
            "list", "pods", query={"fieldSelector": f"spec.nodeName={k.name}"}
        )
        for p in pods["items"]:  # the pod garbage collector force-deletes orphans
            m = p["metadata"]
            try:
                await self._admin.request(
                    "delete",
                    "pods",
                    namespace=m["namespace"],
                    name=m["name"],
                    body={"gracePeriodSeconds": 0},
                )
            except LocalApiError as e:
                if e.code != 404:
                    raise
        return {"node": k.name, "deleted": True, "pods_lost": len(pods["items"])}

    async def _fault_pause(self, body: dict[str, Any]) -> dict[str, Any]:
        k = self._kubelet(body)
        if body.get("paused", True):
            k.paused.clear()
        else:
            k.paused.set()
        return {"node": k.name, "paused": not k.paused.is_set()}

    async def _fault_pull_fail(self, body: dict[str, Any]) -> dict[str, Any]:
        """The next ``times`` pulls of images matching ``image`` (a glob on the normalised
        name) fail with ErrImagePull, on ``node`` or on every node."""
        pattern, times = str(body.get("image", "*")), int(body.get("times", 1))
        kubelets = [self._kubelet(body)] if body.get("node") else list(self.kubelets.values())
        for k in kubelets:
            k.images.fail_next[pattern] = times
        return {"image": pattern, "times": times, "nodes": len(kubelets)}

    async def _fault_evict(self, body: dict[str, Any]) -> dict[str, Any]:
        ns, name = str(body.get("namespace", "")), str(body.get("name", ""))
        pod = await self._admin.request("get", "pods", namespace=ns, name=name)
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or node not in self.kubelets:
            raise BadRequest(f"pod {ns}/{name} is not running on a simulated node")
        msg = str(body.get("message", "The node was low on resource: memory."))
        await self.kubelets[node].evict(ns, name, msg)
        return {"pod": f"{ns}/{name}", "evicted": True}


def _share(node: NodeSettings, f: float) -> tuple[str, str]:
    """``f`` of the node's CPU and memory as quantities (memory in whole MiB)."""
    cpu = format_cpu(int(to_milli(node.cpu) * f))
    return cpu, format_memory(int(to_units(node.memory) * f) // 2**20 * 2**20)
