"""The default scheduler: binds the pods that name ``default-scheduler`` (or no scheduler)
and no node, as kube-scheduler beside KWOK's nodes does, so other tenants' workloads and an
operator's ``kubectl run`` behave on simcluster as on a cluster.

Why it talks to the API: the bind is a ``pods/binding`` POST through the dispatcher (as
``system:kube-scheduler``), the very path a client's bind takes, so validation, RBAC, flow
control, metrics, resourceVersions, watch events and the kubelet's pick-up are those of any
bind. A pod that fits nowhere gets upstream's answer: ``PodScheduled=False`` with reason
``Unschedulable`` and the FitError message (a ``pods/status`` patch, written only when it
changed) and a ``FailedScheduling`` Warning event (repeats counted on one event, as the
event recorder's correlator does); a bound pod gets a ``Scheduled`` event. Every request
takes a token of the client's bucket (``binds_per_s``, kube-scheduler's client QPS).

Pods naming another scheduler (Sandman's ``sandman``) are never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from simcluster.apiserver.auth import User
from simcluster.apiserver.local import LocalApiError, LocalClient
from simcluster.apiserver.meta import rfc3339
from simcluster.apiserver.store import Store
from simcluster.errors import SimclusterError
from simcluster.scheduler.cache import ClusterCache, Obj, pod_info
from simcluster.scheduler.framework import decide
from simcluster.scheduler.queue import PodKey, SchedulingQueue
from simcluster.scheduler.settings import DEFAULT_SCHEDULER_NAME, SchedulerSettings
from simcluster.token_bucket import TokenBucket

__all__ = ["SCHEDULER_USER", "DefaultScheduler"]

log = logging.getLogger(__name__)

#: kube-scheduler's identity (upstream binds it to the ``system:kube-scheduler`` ClusterRole).
SCHEDULER_USER = User("system:kube-scheduler", ())
_INSTANCE = f"{DEFAULT_SCHEDULER_NAME}-simcluster"
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


class DefaultScheduler:
    def __init__(self, settings: SchedulerSettings, store: Store, client: LocalClient) -> None:
        self.settings = settings
        self.store = store
        self.client = client
        self.queue = SchedulingQueue(settings)
        self.cache = ClusterCache(self.queue.add, self.queue.remove, self.queue.cluster_changed)
        self.bucket = TokenBucket(settings.binds_per_s, settings.burst)
        self.bound = 0  # pods this scheduler bound
        #: pod -> (event name, message, count) of its last FailedScheduling event
        self._events: dict[PodKey, tuple[str, str, int]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.cache.sync(self.store)
        self.store.add_listener(self.cache.handle)
        self._task = asyncio.create_task(self._run(), name="default scheduler")

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.store.remove_listener(self.cache.handle)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            self.queue.wake.clear()
            ready = self.queue.pop_ready()
            if not ready:
                await self._sleep(self.queue.next_wakeup_s())
                continue
            for key in ready:
                try:
                    await self._schedule_one(key)
                except LocalApiError as e:  # a throttled or failed write: try later
                    log.debug("scheduler: %s: %s", key, e)
                    self.queue.retry(key)
                except Exception:  # a bug must not end the scheduler for every pod
                    log.exception("scheduler: %s", key)
                    self.queue.retry(key)

    async def _sleep(self, timeout_s: float | None) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self.queue.wake.wait()

    async def _schedule_one(self, key: PodKey) -> None:
        pod = self.cache.pending.get(key)
        if pod is None:
            return
        if (pod.get("spec") or {}).get("schedulingGates"):
            # upstream's SchedulingGates PreEnqueue: not tried, no event; lifting the gates is
            # a spec change, which queues it again
            await self._condition(pod, GATED_MESSAGE, "SchedulingGated")
            return
        try:
            info = pod_info(pod)
        except SimclusterError as e:
            await self._unschedulable(pod, f"pod requests do not parse: {e}")
            return
        decision = decide(info, self.cache.nodes.values())
        if decision.node is None:
            await self._unschedulable(pod, decision.message)
            return
        await self._bind(pod, decision.node, info.cpu_milli, info.memory)

    async def _bind(self, pod: Obj, node: str, cpu: int, memory: int) -> None:
        meta = pod["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        self.cache.assume(uid, node, cpu, memory)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"namespace": ns, "name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.bucket.take()
        try:
            await self.client.request(
                "create", "pods", namespace=ns, name=name, subresource="binding", body=binding
            )
        except LocalApiError as e:
            self.cache.forget(uid)
            if e.code in (404, 409):  # gone, or bound by someone else: nothing to do
                log.debug("scheduler: bind %s/%s: %s", ns, name, e)
                return
            raise
        self.bound += 1
        self._events.pop((ns, name), None)
        message = f"Successfully assigned {ns}/{name} to {node}"
        await self._event(pod, "Normal", "Scheduled", message)

    async def _unschedulable(self, pod: Obj, message: str) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        self.queue.unschedulable(key)
        await self._condition(pod, message)
        await self._failed_event(pod, message)

    async def _condition(self, pod: Obj, message: str, reason: str = "Unschedulable") -> None:
        """``PodScheduled=False`` with ``reason`` and ``message``, if not so already."""
        conditions = (pod.get("status") or {}).get("conditions") or ()
        now: Obj = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
        if (now.get("status"), now.get("reason"), now.get("message")) == ("False", reason, message):
            return
        since = now.get("lastTransitionTime") if now.get("status") == "False" else None
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": since or rfc3339(),
        }
        meta = pod["metadata"]
        await self.bucket.take()
        try:
            await self.client.request(
                "patch",
                "pods",
                namespace=meta["namespace"],
                name=meta["name"],
                subresource="status",
                body={"status": {"conditions": [condition]}},
                content_type="application/strategic-merge-patch+json",
            )
        except LocalApiError as e:
            if e.code != 404:  # deleted meanwhile: the listener forgets it
                raise

    async def _failed_event(self, pod: Obj, message: str) -> None:
        """One FailedScheduling event per message; a repeat raises its count."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        last = self._events.get(key)
        if last is None or last[1] != message:
            name = await self._event(pod, "Warning", "FailedScheduling", message)
            self._events[key] = (name, message, 1)
            return
        name, _, count = last
        self._events[key] = (name, message, count + 1)
        patch = {"count": count + 1, "lastTimestamp": rfc3339()}
        await self.bucket.take()
        try:
            await self.client.request(
                "patch",
                "events",
                namespace=key[0],
                name=name,
                body=patch,
                content_type="application/merge-patch+json",
            )
        except LocalApiError as e:
            if e.code != 404:
                raise
            del self._events[key]

    async def _event(self, pod: Obj, kind: str, reason: str, message: str) -> str:
        """A core/v1 Event about ``pod`` from ``default-scheduler``; its name."""
        meta = pod["metadata"]
        name = f"{meta['name']}.{uuid.uuid4().hex[:16]}"
        now = rfc3339()
        body: dict[str, Any] = {
            "metadata": {"name": name, "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": DEFAULT_SCHEDULER_NAME},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": DEFAULT_SCHEDULER_NAME,
            "reportingInstance": _INSTANCE,
            "action": "Scheduling" if reason == "FailedScheduling" else "Binding",
        }
        await self.bucket.take()
        try:
            await self.client.request("create", "events", namespace=meta["namespace"], body=body)
        except LocalApiError as e:  # an event is best effort, as upstream's recorder
            log.debug("scheduler: event for %s/%s: %s", meta["namespace"], meta["name"], e)
        return name
