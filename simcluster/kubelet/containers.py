"""A pod's containers from start to finish: image pulls, start, probes, restarts, exit.

Once admitted, a pod's task runs here for as long as its containers do: through the node's
sandbox-creation limiter and image cache to the runtime's start, then readiness probes and
exits, restarting with CrashLoopBackOff or finishing the pod as its restartPolicy says. This
is the long-running half of the kubelet; the pod loop that starts it, and deletion and
eviction that end it, stay in ``kubelet`` and ``eviction``.
"""

from __future__ import annotations

import asyncio
import time

from simcluster.apiserver.meta import rfc3339
from simcluster.kubelet.podstate import KubeletBase, Obj, PodState
from simcluster.kubelet.runtime import RuntimeStartError, Sandbox, sandbox_from_pod

__all__ = ["VIRTUAL_LABEL", "ContainerLifecycle"]

VIRTUAL_LABEL = "simcluster.io/virtual"  # pods with this label "true" never run processes


class ContainerLifecycle(KubeletBase):
    """Start, probe, restart and finish an admitted pod's containers."""

    async def _run(self, pod: Obj, st: PodState) -> None:
        try:
            await self._start(pod, st)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the pod fails; the node goes on
            self._fail_unexpected(pod, "start", e)

    async def _start(self, pod: Obj, st: PodState) -> None:
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
        self, pod: Obj, st: PodState, sandbox: Sandbox, ready: bool, started_at: str
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

    async def _finish(self, pod: Obj, st: PodState, name: str, code: int, started_at: str) -> None:
        """A container exited and the restart policy says stay down: the pod is terminal."""
        status = self._status(pod, st, False, started_at)
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        for cs in status["containerStatuses"]:
            if cs["name"] == name:
                cs["state"] = {"terminated": self._terminated(code, started_at)}
        st.active = False
        await self._patch_status(pod, status)

    async def _restart(
        self, pod: Obj, st: PodState, sandbox: Sandbox, name: str, code: int, started_at: str
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
