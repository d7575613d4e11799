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
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from simcluster.apiserver.local import LocalApiError, LocalClient
from simcluster.apiserver.meta import rfc3339
from simcluster.apiserver.pods import pod_requests
from simcluster.kubelet.admission import Capacity, admit
from simcluster.kubelet.images import ImageCache, PullStats, normalize_image
from simcluster.kubelet.limits import CreationLimiter
from simcluster.kubelet.metrics import KubeletMetrics
from simcluster.kubelet.node import NodePresence
from simcluster.kubelet.runtime import Runtime, RuntimeStartError, Sandbox, sandbox_from_pod
from simcluster.kubelet.settings import NodeSettings
from simcluster.quantity import to_milli, to_units

__all__ = ["VIRTUAL_LABEL", "Kubelet", "node_ip"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]
VIRTUAL_LABEL = "simcluster.io/virtual"  # pods with this label "true" never run processes


def node_ip(index: int, host: int = 1, network: int = 1) -> str:
    """Node ``index``'s loopback /24: 127.<network+index//256>.<index%256>.<host>."""
    return f"127.{network + index // 256}.{index % 256}.{host}"


@dataclass
class _PodState:
    uid: str
    namespace: str
    name: str
    cpu: int
    memory: int
    active: bool = True  # counts against node capacity
    ip: str = ""
    sandbox: Sandbox | None = None
    task: asyncio.Task[None] | None = None
    terminating: bool = False
    restarts: int = 0
    images: tuple[str, ...] = ()


class Kubelet:
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
        self.pods: dict[str, _PodState] = {}
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

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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

    def _fail_unexpected(self, pod: Obj, stage: str, err: Exception) -> None:
        """Fail ``pod`` for an error this kubelet did not expect, as the real kubelet fails
        a pod whose admission errs; it keeps a (non-counting) entry so it is not retried."""
        meta = pod["metadata"]
        log.warning(
            "kubelet %s: pod %s/%s failed at %s: %r",
            self.name, meta.get("namespace"), meta.get("name"), stage, err,
        )  # fmt: skip
        if self.metrics is not None:
            self.metrics.pod_errors.labels(stage).inc()
        st = self.pods.get(meta["uid"])
        if st is None:
            st = _PodState(meta["uid"], meta["namespace"], meta["name"], 0, 0, active=False)
            self.pods[st.uid] = st
        st.active = False
        status = {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": f"Pod was rejected: unexpected error at {stage}: {err}",
            "startTime": rfc3339(),
        }
        st.task = asyncio.create_task(self._patch_status(pod, status), name=f"fail {st.name}")

    def _track(self, pod: Obj, active: bool) -> _PodState:
        meta = pod["metadata"]
        cpu, mem = pod_requests(pod)
        images = tuple(c.get("image", "") for c in (pod.get("spec") or {}).get("containers") or ())
        st = _PodState(meta["uid"], meta["namespace"], meta["name"], cpu, mem, active)
        st.images = images
        self.pods[st.uid] = st
        return st

    def _track_or_zero(self, pod: Obj) -> _PodState:
        """Track a terminating pod even when its requests do not parse (it counts for
        nothing: it is not active)."""
        try:
            return self._track(pod, active=False)
        except Exception as e:
            log.warning("kubelet %s: pod %s requests: %r", self.name, pod["metadata"]["name"], e)
            meta = pod["metadata"]
            st = _PodState(meta["uid"], meta["namespace"], meta["name"], 0, 0, active=False)
            self.pods[st.uid] = st
            return st

    def _forget(self, st: _PodState) -> None:
        self.pods.pop(st.uid, None)
        if st.task is not None and not st.task.done():
            st.task.cancel()
        ip, st.ip = st.ip, ""
        if st.sandbox is not None:
            sandbox, st.sandbox = st.sandbox, None
            self._spawn(self._stop_then_free(sandbox, ip), f"stop {st.name}")
        elif ip:
            self._free_ips.append(ip)

    async def _stop_then_free(self, sandbox: Sandbox, ip: str) -> None:
        try:
            await self.runtime.stop(sandbox, 0)
        finally:
            if ip:
                self._free_ips.append(ip)

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

    async def _run(self, pod: Obj, st: _PodState) -> None:
        try:
            await self._start(pod, st)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the pod fails; the node goes on
            self._fail_unexpected(pod, "start", e)

    async def _start(self, pod: Obj, st: _PodState) -> None:
        spec = pod["spec"]
        virtual = (pod["metadata"].get("labels") or {}).get(VIRTUAL_LABEL) == "true"
        admitted = time.monotonic()
        try:
            async with self.limiter.slot():
                for c in spec.get("containers") or []:
                    await self.images.ensure(
                        c.get("image", ""), c.get("imagePullPolicy", "IfNotPresent")
                    )
                    self.images.touch(c.get("image", ""))
                st.ip = self._free_ips.popleft()
                s = self.settings
                await asyncio.sleep(
                    max(
                        0.0,
                        s.start_latency_s + self._rng.uniform(-s.start_jitter_s, s.start_jitter_s),
                    )
                )
                sandbox = sandbox_from_pod(pod, st.ip, virtual)
                st.sandbox = sandbox
                await self.runtime.start(sandbox)
        except RuntimeStartError as e:
            waiting = [
                {
                    "name": c["name"],
                    "ready": False,
                    "restartCount": 0,
                    "image": c.get("image", ""),
                    "imageID": "",
                    "started": False,
                    "state": {"waiting": {"reason": e.reason, "message": e.message}},
                }
                for c in spec.get("containers") or []
            ]
            await self._patch_status(pod, self._status(pod, st, False, waiting_statuses=waiting))
            return
        started_at = rfc3339()
        probed = [c for c in sandbox.containers if c.readiness is not None]
        ready = not probed or virtual
        await self._patch_status(pod, self._status(pod, st, ready, started_at))
        self.started += 1
        if self.metrics is not None:
            self.metrics.starts.inc()
            self.metrics.start_seconds.observe(time.monotonic() - admitted)
        if not virtual and (probed or self.runtime.name != "virtual"):
            await self._monitor(pod, st, sandbox, ready, started_at)

    async def _monitor(
        self, pod: Obj, st: _PodState, sandbox: Sandbox, ready: bool, started_at: str
    ) -> None:
        """Readiness probes and exits for pods whose runtime really runs something."""
        probed = [c for c in sandbox.containers if c.readiness is not None]
        first = min((c.readiness.initial_delay_s for c in probed if c.readiness), default=0.0)
        period = min((c.readiness.period_s for c in probed if c.readiness), default=1.0)
        threshold = min((c.readiness.failure_threshold for c in probed if c.readiness), default=3)
        await asyncio.sleep(first)
        failures = 0
        while True:
            exited = self.runtime.exited(sandbox)
            if exited is not None:
                name, code = exited
                policy = pod["spec"].get("restartPolicy", "Always")
                if policy == "Never" or (policy == "OnFailure" and code == 0):
                    await self._finish(pod, st, name, code, started_at)
                    return
                try:
                    started_at = await self._restart(pod, st, sandbox, name, code, started_at)
                except RuntimeStartError:
                    await self._finish(pod, st, name, code, started_at)
                    return
                ready, failures = not probed, 0
                continue
            results = [await self.runtime.probe(sandbox, c) for c in probed]
            ok = all(results)
            failures = 0 if ok else failures + 1
            if ok != ready and (ok or failures >= threshold):
                ready = ok
                await self._patch_status(pod, self._status(pod, st, ready, started_at))
            await asyncio.sleep(period if ready else min(period, 0.5))

    def _terminated(self, code: int, started_at: str) -> Obj:
        reason = "Completed" if code == 0 else "Error"
        return {
            "exitCode": code,
            "reason": reason,
            "startedAt": started_at,
            "finishedAt": rfc3339(),
        }

    async def _finish(self, pod: Obj, st: _PodState, name: str, code: int, started_at: str) -> None:
        """A container exited and the restart policy says stay down: the pod is terminal."""
        status = self._status(pod, st, False, started_at)
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        for cs in status["containerStatuses"]:
            if cs["name"] == name:
                cs["state"] = {"terminated": self._terminated(code, started_at)}
        st.active = False
        await self._patch_status(pod, status)

    async def _restart(
        self, pod: Obj, st: _PodState, sandbox: Sandbox, name: str, code: int, started_at: str
    ) -> str:
        """Restart after an exponential back-off (CrashLoopBackOff), as the kubelet does.
        The whole sandbox restarts (emptyDir contents do not survive it). Returns the new
        start time."""
        st.restarts += 1
        delay = min(self.settings.restart_backoff_s * 2 ** (st.restarts - 1), 300.0)
        status = self._status(pod, st, False, started_at)
        for cs in status["containerStatuses"]:
            if cs["name"] == name:
                cs["lastState"] = {"terminated": self._terminated(code, started_at)}
                msg = f"back-off {delay:g}s restarting failed container={name} pod={st.name}"
                cs["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": msg}}
                cs["started"] = False
        await self._patch_status(pod, status)
        await self.runtime.stop(sandbox, 0)
        await asyncio.sleep(delay)
        await self.runtime.start(sandbox)
        started_at = rfc3339()
        probed = any(c.readiness is not None for c in sandbox.containers)
        await self._patch_status(pod, self._status(pod, st, not probed, started_at))
        return started_at

    def _status(
        self,
        pod: Obj,
        st: _PodState,
        ready: bool,
        started_at: str = "",
        waiting_statuses: list[Obj] | None = None,
    ) -> Obj:
        now = rfc3339()
        old = pod.get("status") or {}
        r = "True" if ready else "False"
        conds = [c for c in old.get("conditions") or [] if c.get("type") == "PodScheduled"]
        conds += [
            {
                "type": "PodReadyToStartContainers",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            },
            {
                "type": "Initialized",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            },
            {"type": "Ready", "status": r, "lastProbeTime": None, "lastTransitionTime": now},
            {
                "type": "ContainersReady",
                "status": r,
                "lastProbeTime": None,
                "lastTransitionTime": now,
            },
        ]
        statuses = waiting_statuses or [
            {
                "name": c["name"],
                "ready": ready,
                "restartCount": st.restarts,
                "started": True,
                "image": c.get("image", ""),
                "imageID": normalize_image(c.get("image", "")),
                "containerID": f"simcluster://{st.uid[:8]}-{c['name']}",
                "state": {"running": {"startedAt": started_at}},
                "lastState": {},
            }
            for c in pod["spec"].get("containers") or []
        ]
        status = {
            "phase": "Pending" if waiting_statuses else "Running",
            "conditions": conds,
            "hostIP": self.ip,
            "hostIPs": [{"ip": self.ip}],
            "startTime": old.get("startTime") or now,
            "qosClass": old.get("qosClass", "BestEffort"),
            "containerStatuses": statuses,
        }
        if st.ip:
            status["podIP"] = st.ip
            status["podIPs"] = [{"ip": st.ip}]
        return status

    async def _patch_status(self, pod: Obj, status: Obj) -> None:
        meta = pod["metadata"]
        try:
            await self.client.request(
                "patch",
                "pods",
                namespace=meta["namespace"],
                name=meta["name"],
                subresource="status",
                body={"status": status},
                content_type="application/merge-patch+json",
            )
        except LocalApiError as e:
            log.debug("status update of %s failed: %s", meta["name"], e)

    async def _terminate(self, pod: Obj, st: _PodState) -> None:
        meta = pod["metadata"]
        if st.task is not None and not st.task.done():
            st.task.cancel()
            await asyncio.gather(st.task, return_exceptions=True)
        if st.sandbox is not None:
            sandbox, st.sandbox = st.sandbox, None
            await self.runtime.stop(sandbox, float(meta.get("deletionGracePeriodSeconds") or 0))
        st.active = False
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        try:
            await self.client.request(
                "delete", "pods", namespace=meta["namespace"], name=meta["name"], body=body
            )
        except LocalApiError as e:
            if e.code not in (404, 409):
                log.debug("final delete of %s failed: %s", meta["name"], e)

    async def evict(self, namespace: str, name: str, message: str) -> bool:
        """Kubelet-style eviction: stop the pod, mark it Failed/Evicted (the object stays)."""
        st = next(
            (s for s in self.pods.values() if s.namespace == namespace and s.name == name), None
        )
        if st is None:
            return False
        pod = await self.client.request("get", "pods", namespace=namespace, name=name)
        if st.task is not None and not st.task.done():
            st.task.cancel()
        if st.sandbox is not None:
            sandbox, st.sandbox = st.sandbox, None
            await self.runtime.stop(sandbox, 0)
        st.active = False
        status = dict(pod.get("status") or {}, phase="Failed", reason="Evicted", message=message)
        await self._patch_status(pod, status)
        return True
