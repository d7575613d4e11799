"""Per-sandbox timestamps from a pod watch, on the benchmark's own monotonic clock.

Why a watch and the local clock: Kubernetes timestamps have one-second resolution and come
from another process's wall clock; the burst's stages last milliseconds to seconds. So the
benchmark watches the sandbox pods (admin credentials: the watch is exempt from the
budget under test) and stamps each transition when it is first seen: ``spec.nodeName`` set
= bound, phase Running = running, the Ready condition True = ready, DELETED = gone.
``requested`` and ``created`` are stamped by the request driver around each create call;
``seen`` is the first event showing the pod at all (the API server has stored it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from kube import PODS, Gone, KubeClient, KubeError
from kube.contract import LABEL_SANDBOX
from load.burst.analysis import SandboxTimes

__all__ = ["PodRecorder"]


class PodRecorder:
    """``start()`` a background watch; read ``sandboxes`` and the counters at any time."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        label_selector: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._selector = label_selector
        self._clock = clock
        self.t0 = clock()
        self.sandboxes: dict[str, SandboxTimes] = {}
        self.live: set[str] = set()  # pods that exist now
        self.counts = {"bound": 0, "running": 0, "ready": 0, "failed": 0}
        self.events = 0
        self._task: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()

    def now(self) -> float:
        """Seconds since ``t0`` (set by the driver to the first request)."""
        return self._clock() - self.t0

    def get(self, sandbox_id: str) -> SandboxTimes:
        s = self.sandboxes.get(sandbox_id)
        if s is None:
            s = self.sandboxes[sandbox_id] = SandboxTimes(sandbox_id)
        return s

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pod-recorder")
        await self._synced.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        rv = await self._list()
        while True:
            try:
                async with self._client.watch(
                    PODS,
                    self._namespace,
                    resource_version=rv,
                    label_selector=self._selector,
                    timeout_seconds=3600,
                ) as events:
                    async for ev in events:
                        meta = ev.object.get("metadata") or {}
                        rv = meta.get("resourceVersion") or rv
                        if ev.type != "BOOKMARK":
                            self.observe(ev.type, ev.object)
            except Gone:
                rv = await self._list()
            except KubeError:
                await asyncio.sleep(0.5)

    async def _list(self) -> str:
        listing = await self._client.list(PODS, self._namespace, label_selector=self._selector)
        for pod in listing.get("items") or []:
            self.observe("ADDED", pod)
        self._synced.set()
        return str(listing["metadata"]["resourceVersion"])

    def observe(self, kind: str, pod: Mapping[str, Any]) -> None:
        """Stamp the transitions ``pod`` shows for the first time."""
        self.events += 1
        meta = pod.get("metadata") or {}
        sid = (meta.get("labels") or {}).get(LABEL_SANDBOX) or meta.get("name", "")
        name = meta.get("name", "")
        s = self.get(sid)
        now = self.now()
        if kind == "DELETED":
            self.live.discard(name)
            if s.deleted is None:
                s.deleted = now
            return
        self.live.add(name)
        if s.seen is None:
            s.seen = now
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName") and s.bound is None:
            s.bound, s.node = now, spec["nodeName"]
            self.counts["bound"] += 1
        phase = status.get("phase")
        if phase == "Running" and s.running is None:
            s.running = now
            self.counts["running"] += 1
        if s.ready is None and _ready(status):
            s.ready = now
            self.counts["ready"] += 1
        if phase == "Failed" and not s.failed:
            s.failed = status.get("reason") or "Failed"
            self.counts["failed"] += 1


def _ready(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
