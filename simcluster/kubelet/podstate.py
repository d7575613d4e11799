"""What the kubelet tracks per pod, and the pod status it reports through the API.

Admission, the container lifecycle and deletion/eviction (``kubelet``, ``containers``,
``eviction``) each change a pod's ``PodState`` and patch its status; the state record, the
attributes ``Kubelet.__init__`` builds, and the status they all write (its conditions,
container statuses, and the one patch call that sends it) are declared once here, so each of
those modules types against one base and none imports another sideways.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from simcluster.apiserver.local import LocalApiError, LocalClient
from simcluster.apiserver.meta import rfc3339
from simcluster.kubelet.images import ImageCache, normalize_image
from simcluster.kubelet.limits import CreationLimiter
from simcluster.kubelet.metrics import KubeletMetrics
from simcluster.kubelet.node import NodePresence
from simcluster.kubelet.runtime import Runtime, Sandbox
from simcluster.kubelet.settings import NodeSettings

__all__ = ["KubeletBase", "Obj", "PodState"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]


@dataclass
class PodState:
    """One pod this kubelet has admitted (or refused): what it holds of the node."""

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


class KubeletBase:
    """The state ``Kubelet.__init__`` builds and the status writes every part of it makes."""

    name: str
    index: int
    client: LocalClient
    runtime: Runtime
    settings: NodeSettings
    ip: str
    cap_cpu: int
    cap_mem: int
    pods: dict[str, PodState]
    _rng: random.Random
    node: NodePresence
    images: ImageCache
    limiter: CreationLimiter
    paused: asyncio.Event
    _free_ips: collections.deque[str]
    _tasks: list[asyncio.Task[None]]
    _background: set[asyncio.Task[None]]
    started: int
    metrics: KubeletMetrics | None

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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
            st = PodState(meta["uid"], meta["namespace"], meta["name"], 0, 0, active=False)
            self.pods[st.uid] = st
        st.active = False
        status = {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": f"Pod was rejected: unexpected error at {stage}: {err}",
            "startTime": rfc3339(),
        }
        st.task = asyncio.create_task(self._patch_status(pod, status), name=f"fail {st.name}")

    def _terminated(self, code: int, started_at: str) -> Obj:
        reason = "Completed" if code == 0 else "Error"
        return {
            "exitCode": code,
            "reason": reason,
            "startedAt": started_at,
            "finishedAt": rfc3339(),
        }

    def _status(
        self,
        pod: Obj,
        st: PodState,
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
