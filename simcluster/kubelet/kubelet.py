"""A simulated kubelet: one per Node, talking to the API server like the real one.

It registers its Node and Lease, renews the lease and posts node status (conditions,
capacity, ``status.images``), watches the pods bound to it (``fieldSelector=spec.nodeName``,
resuming by resourceVersion and relisting on 410), and for each pod: admission (over
capacity -> phase Failed with reason OutOfcpu/OutOfmemory/OutOfpods, as the real kubelet),
the per-node sandbox-creation limiter, image pulls through the node's image cache, container
start latency with jitter, the runtime, readiness probes, and status updates through the
API. Deleting a pod stops its containers within the grace period, then the kubelet removes
the object (delete with grace 0 and a uid precondition), as upstream does.

A kubelet survives any pod the API server accepted: an error while handling one pod
(quantities it cannot parse, a spec its runtime cannot build a sandbox from) fails that pod
with reason ``UnexpectedAdmissionError`` (as the real kubelet reports an admit handler's
unexpected error), is logged and counted in ``simcluster_kubelet_pod_errors``, and the
node's pod loop goes on; without this one hostile object ended the watch loop while the
Lease kept renewing, so the node looked Ready and never started another pod.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random

from simcluster.apiserver.local import LocalApiError, LocalClient
from simcluster.apiserver.meta import rfc3339
from simcluster.apiserver.pods import pod_requests
from simcluster.kubelet.admission import Capacity, admit
from simcluster.kubelet.containers import VIRTUAL_LABEL, ContainerLifecycle
from simcluster.kubelet.eviction import PodRemoval
from simcluster.kubelet.images import ImageCache, PullStats
from simcluster.kubelet.limits import CreationLimiter
from simcluster.kubelet.metrics import KubeletMetrics
from simcluster.kubelet.node import NodePresence
from simcluster.kubelet.podstate import Obj, PodState
from simcluster.kubelet.runtime import Runtime, Sandbox
from simcluster.kubelet.settings import NodeSettings
from simcluster.kubelet.storage import StorageMeter, storage_eviction_loop
from simcluster.quantity import to_milli, to_units

__all__ = ["VIRTUAL_LABEL", "Kubelet", "node_ip"]

log = logging.getLogger(__name__)


def node_ip(index: int, host: int = 1, network: int = 1) -> str:
    """Node ``index``'s loopback /24: 127.<network+index//256>.<index%256>.<host>."""
    return f"127.{network + index // 256}.{index % 256}.{host}"


class Kubelet(ContainerLifecycle, PodRemoval):
    """One node's kubelet: its Node and Lease, the watch of its pods, and admission; the
    containers run in ``ContainerLifecycle`` and pods end in ``PodRemoval``."""

    def __init__(
        self,
        name: str,
        index: int,
        client: LocalClient,
        runtime: Runtime,
        settings: NodeSettings,
        seed: int = 0,
        metrics: KubeletMetrics | None = None,
        network: int = 1,
        pull_stats: PullStats | None = None,
    ) -> None:
        self.name = name
        self.index = index
        self.client = client
        self.runtime = runtime
        self.settings = settings
        self.ip = node_ip(index, network=network)
        self.cap_cpu = to_milli(settings.cpu)
        self.cap_mem = to_units(settings.memory)
        self.pods: dict[str, PodState] = {}
        self._rng = random.Random(seed * 100_003 + index)
        self.node = NodePresence(name, self.ip, client, settings, runtime.name, self._rng, metrics)
        self.images = ImageCache(
            settings.pull,
            settings.preloaded_images,
            self.node.mark_dirty,
            in_use=self._images_in_use,
            stats=pull_stats,
        )
        self.limiter = CreationLimiter(settings.creation_rate, settings.creation_concurrency)
        self.paused = asyncio.Event()
        self.paused.set()  # set = running
        # First in, first out, and an address comes back only once its pod's processes have
        # stopped: a new pod never lands on an address a dying one still listens on.
        self._free_ips = collections.deque(node_ip(index, h, network) for h in range(2, 255))
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self.started = 0  # pods that reached Running
        self.metrics = metrics
        self.node.images = self.images

    def _images_in_use(self) -> set[str]:
        """Images of the node's active pods: the image GC never removes them."""
        return {i for st in self.pods.values() if st.active for i in st.images}

    # --- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        await self.node.register()
        self._tasks = [
            asyncio.create_task(self._watch_loop(), name=f"kubelet {self.name} watch"),
            asyncio.create_task(self.node.heartbeat_loop(), name=f"kubelet {self.name} heartbeat"),
            asyncio.create_task(self.node.status_loop(), name=f"kubelet {self.name} status"),
        ]
        if isinstance(self.runtime, StorageMeter) and self.settings.storage_check_interval_s > 0:
            loop = storage_eviction_loop(
                self.runtime, self._sandboxes, self.evict, self.settings.storage_check_interval_s
            )
            self._tasks.append(asyncio.create_task(loop, name=f"kubelet {self.name} eviction"))

    def _sandboxes(self) -> list[Sandbox]:
        """The sandboxes of this node's running pods (what the eviction check measures)."""
        return [st.sandbox for st in self.pods.values() if st.active and st.sandbox is not None]

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._background]
        tasks += [st.task for st in self.pods.values() if st.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for st in list(self.pods.values()):
            if st.sandbox is not None:
                await self.runtime.stop(st.sandbox, 0)
        self.pods.clear()
        await self.images.close()

    # --- node and lease ------------------------------------------------------------------
    @property
    def not_ready(self) -> bool:
        return self.node.not_ready

    @not_ready.setter
    def not_ready(self, value: bool) -> None:
        self.node.not_ready = value

    async def post_node_status(self, force: bool = False) -> None:
        await self.node.post_node_status(force)

    # --- pods ----------------------------------------------------------------------------
    async def _watch_loop(self) -> None:
        """List once, then watch and resume from the last resourceVersion seen when a stream
        ends (a timeout, a dropped connection); relist only on 410 or an error. Relisting at
        every stream end made 400 kubelets scan every pod each time the server dropped its
        watches, stalling the API server's loop for seconds."""
        rv = ""
        while True:
            try:
                if not rv:
                    rv = await self._relist()
                rv = await self._watch_from(rv)
            except LocalApiError as e:
                log.debug("kubelet %s watch error: %s", self.name, e)
                rv = ""
                await asyncio.sleep(1.0)

    async def _relist(self) -> str:
        listed = await self.client.request(
            "list", "pods", query={"fieldSelector": f"spec.nodeName={self.name}"}
        )
        seen = {p["metadata"]["uid"] for p in listed["items"]}
        for uid in [u for u in self.pods if u not in seen]:
            self._forget(self.pods[uid])
        for pod in listed["items"]:
            await self._handle("ADDED", pod)
        return str(listed["metadata"]["resourceVersion"])

    async def _watch_from(self, rv: str) -> str:
        """Watch from ``rv`` until the stream ends; the resourceVersion to resume from, or
        "" to relist (410)."""
        query = {
            "fieldSelector": f"spec.nodeName={self.name}",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
        }
        async for ev in self.client.watch("pods", query=query):
            if ev["type"] == "ERROR":
                return ""  # 410: relist
            rv = (ev["object"].get("metadata") or {}).get("resourceVersion") or rv
            await self._handle(ev["type"], ev["object"])
        return rv

    async def _handle(self, etype: str, pod: Obj) -> None:
        if etype == "BOOKMARK":
            return
        await self.paused.wait()
        meta = pod["metadata"]
        st = self.pods.get(meta["uid"])
        if etype == "DELETED":
            if st is not None:
                self._forget(st)
            return
        if meta.get("deletionTimestamp"):
            if st is None or not st.terminating:
                st = st or self._track_or_zero(pod)
                st.terminating = True
                self._spawn(self._terminate(pod, st), f"terminate {meta['name']}")
            return
        if st is None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            try:
                self._admit(pod)
            except Exception as e:  # a hostile pod fails alone, never the node's loop
                self._fail_unexpected(pod, "admit", e)

    def _track(self, pod: Obj, active: bool) -> PodState:
        meta = pod["metadata"]
        cpu, mem = pod_requests(pod)
        images = tuple(c.get("image", "") for c in (pod.get("spec") or {}).get("containers") or ())
        st = PodState(meta["uid"], meta["namespace"], meta["name"], cpu, mem, active)
        st.images = images
        self.pods[st.uid] = st
        return st

    def _track_or_zero(self, pod: Obj) -> PodState:
        """Track a terminating pod even when its requests do not parse (it counts for
        nothing: it is not active)."""
        try:
            return self._track(pod, active=False)
        except Exception as e:
            log.warning("kubelet %s: pod %s requests: %r", self.name, pod["metadata"]["name"], e)
            meta = pod["metadata"]
            st = PodState(meta["uid"], meta["namespace"], meta["name"], 0, 0, active=False)
            self.pods[st.uid] = st
            return st

    def _admit(self, pod: Obj) -> None:
        active = [s for s in self.pods.values() if s.active]
        used = (len(active), sum(s.cpu for s in active), sum(s.memory for s in active))
        cap = Capacity(self.settings.max_pods, self.cap_cpu, self.cap_mem)
        verdict = admit(
            pod["spec"], pod_requests(pod), used, cap, self.node.labels, self.node.taints
        )
        if verdict is not None:
            reason, message = verdict
            st = self._track(pod, active=False)
            status = {
                "phase": "Failed",
                "reason": reason,
                "message": message,
                "startTime": rfc3339(),
            }
            st.task = asyncio.create_task(self._patch_status(pod, status), name=f"reject {st.name}")
            if self.metrics is not None:
                self.metrics.rejections.labels(reason).inc()
            return
        st = self._track(pod, active=True)
        st.task = asyncio.create_task(self._run(pod, st), name=f"run {st.name}")
