"""How the kubelet lets go of a pod: deletion within the grace period, eviction, forgetting.

A deleted pod's containers are stopped within its grace period and the object removed (a
delete with grace 0 and a uid precondition, as upstream's kubelet); an evicted pod is stopped
and marked Failed/Evicted; a pod gone from the API is forgotten, its address freed only once
its processes have stopped. These are the ends of a pod's life, apart from its running.
"""

from __future__ import annotations

import asyncio
import logging

from simcluster.apiserver.local import LocalApiError
from simcluster.kubelet.podstate import KubeletBase, Obj, PodState
from simcluster.kubelet.runtime import Sandbox

__all__ = ["PodRemoval"]

log = logging.getLogger(__name__)


class PodRemoval(KubeletBase):
    """Stop and release pods: deleted, evicted, or no longer bound here."""

    def _forget(self, st: PodState) -> None:
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

    async def _terminate(self, pod: Obj, st: PodState) -> None:
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
