"""The bulk binder: pending sandboxes -> a plan -> concurrent ``pods/binding`` POSTs.

Why batches: kube-scheduler places one pod per cycle; a training step creates thousands of
identical sandboxes within seconds. The binder gathers pending pods for a few milliseconds
(or until a batch is full), asks the placement engine for one plan, and hands the
assignments to a pool of bind workers. Planning the next batch never waits for binds: the
plan reserves capacity in the scheduler's assumed ledger, so in-flight binds are already
accounted for.

Per bind outcome (the client already retried 429 and 5xx, binds being safe to repeat):

- 201: done; the bound-pod watch event confirms the reservation.
- 409: the pod is bound already (our earlier attempt whose answer was lost, or someone
  else) or its uid changed: keep the reservation and let the watch confirm it or the ledger
  expire it — never free capacity that may be taken.
- 404: the pod is gone: forget the reservation.
- anything else: forget, and retry the pod after an exponential backoff.
- 403 too, but it is no transient: the controller's RBAC lacks the bind (an operator
  removed the rule, or never applied it). Retrying alone would be a silent stall, every
  sandbox Pending for ever; so a 403 is logged as an error naming the missing permission,
  counted (``sandman_api_requests_total{code="403"}``) and held in ``forbidden`` until a
  bind succeeds, which fails ``/readyz`` (controller/app.py): the Deployment shows it.

Unschedulable pods get one ``FailedScheduling`` Event (the only other write, off the hot
path) and are parked until the cluster view reports that capacity may have appeared; parked
pods are then re-planned at most once per ``retry_unschedulable_s`` — never hot-looped.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.metrics import ControllerMetrics
from controller.view import ClusterView
from kube import EVENTS, Conflict, Forbidden, KubeClient, KubeError, NotFound
from kube.cache import Obj
from kube.informer import Handlers
from kube.times import epoch_seconds, format_time
from sandman.base.backoff import Backoff
from sandman.base.settings import fixed, setting
from scheduler import Assignment, Scheduler, Unschedulable

__all__ = ["Binder", "BinderSettings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BinderSettings:
    batch_size: int = setting(1000, help="plan as soon as this many pods are pending...")
    batch_wait_s: float = setting(0.005, help="...or this long after the first one arrived")
    bind_workers: int = setting(
        128, help="bind requests in flight at once (the client's token bucket still applies)"
    )
    retry_unschedulable_s: float = setting(
        1.0,
        help="re-plan parked unschedulable pods at most this often (when capacity may have "
        "appeared)",
    )
    retry_base_s: float = setting(
        0.5,
        help="backoff of a pod whose bind failed for another reason: after n failures up to "
        "retry_base_s * 2**(n-1), capped, equal jitter (a pod never comes back at once)",
    )
    retry_cap_s: float = setting(30.0, help="the longest backoff of a failed bind")
    expire_interval_s: float = setting(
        1.0, help="how often reservations past the scheduler's assume_ttl_s are released"
    )
    component: str = fixed(
        "sandman-controller",
        why="the source of its Events: the facade finds the controller's Events by it "
        "(FacadeSettings.controller_component)",
    )
    record_events: bool = setting(
        True, help="a FailedScheduling Event per unschedulable pod (and per failed bind)"
    )

    def __post_init__(self) -> None:
        self.retry_backoff  # noqa: B018 - validates the backoff values now, not at a failure

    @property
    def retry_backoff(self) -> Backoff:
        """The per-pod retry delays (the one helper every Sandman retry loop uses)."""
        return Backoff(
            initial_s=self.retry_base_s,
            cap_s=self.retry_cap_s,
            jitter="equal",
            max_retry_after_s=self.retry_cap_s,
        )


class Binder:
    """Call :meth:`attach` once (standbys too); :meth:`run` while leading."""

    def __init__(
        self,
        client: KubeClient,
        view: ClusterView,
        settings: BinderSettings | None = None,
        metrics: ControllerMetrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.view = view
        self.scheduler: Scheduler = view.scheduler
        self.settings = settings or BinderSettings()
        self.metrics = metrics or ControllerMetrics()
        self._outcomes = {  # labelled once: one of them counts every bind
            o: self.metrics.binds.labels(o) for o in ("bound", "conflict", "gone", "error")
        }
        self._clock = clock
        self._pending: dict[str, Obj] = {}  # uid -> pod, every pending sandbox
        self._queue: dict[str, None] = {}  # uids to plan, FIFO
        self._inflight: set[str] = set()
        self._parked: set[str] = set()
        self._reported: set[str] = set()  # uids with a FailedScheduling Event
        self._failures: dict[str, int] = {}
        self._rng = random.Random()
        self._retry_handles: set[asyncio.TimerHandle] = set()
        self._wakeup = asyncio.Event()
        self._capacity_hint = asyncio.Event()
        self._binds: asyncio.Queue[Assignment] = asyncio.Queue()
        self._events: asyncio.Queue[Unschedulable] = asyncio.Queue()
        self.leading = False
        #: The last bind's Forbidden message while binds are refused (None once one works).
        self.forbidden: str | None = None

    # --- cluster view -------------------------------------------------------------------
    def attach(self) -> None:
        self.view.pending.add_handler(
            Handlers(add=self._pod_pending, update=self._pod_changed, delete=self._pod_gone)
        )
        self.view.bound.add_handler(Handlers(add=self._pod_bound, update=self._pod_progress))
        self.view.on_capacity(self._capacity_hint.set)

    def _pod_pending(self, pod: Obj) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if meta.get("deletionTimestamp") or (pod.get("spec") or {}).get("nodeName"):
            self._pod_gone(pod)
            return
        self._pending[uid] = pod
        if uid not in self._inflight and uid not in self._parked and uid not in self._failures:
            self._enqueue(uid)

    def _pod_changed(self, _old: Obj, new: Obj) -> None:
        self._pod_pending(new)

    def _pod_gone(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        self._pending.pop(uid, None)
        self._queue.pop(uid, None)
        self._parked.discard(uid)
        self._reported.discard(uid)
        self._failures.pop(uid, None)
        self.metrics.pending.set(len(self._pending))

    def _enqueue(self, uid: str) -> None:
        if uid in self._pending:
            self._queue[uid] = None
            self._wakeup.set()
        self.metrics.pending.set(len(self._pending))

    def _pod_bound(self, pod: Obj) -> None:
        spec = pod.get("spec") or {}
        if spec.get("schedulerName") != self.view.settings.scheduler_name:
            return
        created = epoch_seconds(pod["metadata"].get("creationTimestamp"))
        scheduled = _condition_time(pod, "PodScheduled")
        if created is not None and scheduled is not None:
            self.metrics.create_to_bound.observe(max(0.0, scheduled - created))

    def _pod_progress(self, old: Obj, new: Obj) -> None:
        if (new.get("spec") or {}).get("schedulerName") != self.view.settings.scheduler_name:
            return
        if _is_true(_condition(old, "Ready")) or not _is_true(ready := _condition(new, "Ready")):
            return  # only the update that makes the pod Ready (most updates are not it)
        assert ready is not None
        ready_at = epoch_seconds(ready.get("lastTransitionTime"))
        scheduled = _condition_time(new, "PodScheduled")
        if ready_at is not None and scheduled is not None:
            self.metrics.bound_to_ready.observe(max(0.0, ready_at - scheduled))

    # --- leading ------------------------------------------------------------------------
    async def run(self) -> None:
        """Plan and bind until cancelled. Waits for the view's caches first."""
        await self.view.wait_synced()
        self.leading = True
        for uid in self._pending:
            if uid not in self._inflight:
                self._enqueue(uid)
        try:
            async with asyncio.TaskGroup() as tg:
                for _ in range(self.settings.bind_workers):
                    tg.create_task(self._bind_worker())
                if self.settings.record_events:
                    tg.create_task(self._event_worker())
                tg.create_task(self._expire_loop())
                tg.create_task(self._unpark_loop())
                await self._plan_loop()
        finally:
            self._stop()

    def _stop(self) -> None:
        """Leadership ended: drop our reservations and timers; the next leader starts over."""
        self.leading = False
        for handle in self._retry_handles:
            handle.cancel()
        self._retry_handles.clear()
        self.scheduler.expire(float("inf"))
        self._inflight.clear()
        self._failures.clear()
        while not self._binds.empty():
            self._binds.get_nowait()

    async def _plan_loop(self) -> None:
        s = self.settings
        while True:
            await self._wakeup.wait()
            if len(self._queue) < s.batch_size:
                await asyncio.sleep(s.batch_wait_s)
            self._wakeup.clear()
            batch = list(self._queue)[: s.batch_size]
            for uid in batch:
                del self._queue[uid]
            if len(self._queue):
                self._wakeup.set()
            self.plan(batch)

    def plan(self, uids: list[str]) -> None:
        """Plan the pending pods ``uids`` and queue their binds (synchronous, no I/O)."""
        pods = [self._pending[u] for u in uids if u in self._pending and u not in self._inflight]
        if not pods:
            return
        start = time.perf_counter()
        plan = self.scheduler.plan(pods, self._clock())
        self.metrics.plan_duration.observe(time.perf_counter() - start)
        self.metrics.batch_size.observe(len(pods))
        for a in plan.assignments:
            self._inflight.add(a.uid)
            self._parked.discard(a.uid)
            self._binds.put_nowait(a)
        for u in plan.unschedulable:
            self._park(u)
        for uid in plan.deferred:
            self._parked.add(uid)
        self.metrics.unschedulable.set(len(self._parked))

    def _park(self, u: Unschedulable) -> None:
        self._parked.add(u.uid)
        if u.uid not in self._reported and self.settings.record_events:
            self._reported.add(u.uid)
            self._events.put_nowait(u)

    # --- binding ------------------------------------------------------------------------
    async def _bind_worker(self) -> None:
        while True:
            a = await self._binds.get()
            try:
                await self._bind(a)
            finally:
                self._inflight.discard(a.uid)

    async def _bind(self, a: Assignment) -> None:
        try:
            await self.client.bind(a.namespace, a.name, a.uid, a.node)
        except Conflict:
            self._outcomes["conflict"].inc()  # bound already: the watch confirms
            self._failures.pop(a.uid, None)
        except NotFound:
            self._outcomes["gone"].inc()
            self.scheduler.forget(a.uid)
            self._pending.pop(a.uid, None)
        except KubeError as e:
            self._outcomes["error"].inc()
            self.scheduler.forget(a.uid)
            if isinstance(e, Forbidden):
                self._refused(e)
            self._retry_later(a.uid, e)
        else:
            self._outcomes["bound"].inc()
            self._failures.pop(a.uid, None)
            if self.forbidden is not None:
                log.info("binds are allowed again")
                self.forbidden = None

    def _refused(self, error: Forbidden) -> None:
        if self.forbidden is None:
            log.error(
                "binds forbidden (403): the controller's RBAC lacks create on pods/binding; "
                "not ready until a bind succeeds: %s",
                error,
            )
        self.forbidden = str(error)

    def _retry_later(self, uid: str, error: KubeError) -> None:
        n = self._failures.get(uid, 0) + 1
        self._failures[uid] = n
        delay = self.settings.retry_backoff.delay(n, error.retry_after_s, self._rng)
        log.warning("bind of %s failed (%s); retry %d in %.1fs", uid, error, n, delay)
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._retry_handles.discard(handle)
            self._enqueue(uid)

        handle = loop.call_later(delay, fire)
        self._retry_handles.add(handle)

    # --- housekeeping -------------------------------------------------------------------
    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.expire_interval_s)
            for uid in self.scheduler.expire(self._clock()):
                if uid in self._pending and uid not in self._inflight:
                    self._enqueue(uid)

    async def _unpark_loop(self) -> None:
        while True:
            await self._capacity_hint.wait()
            self._capacity_hint.clear()
            if self._parked:
                parked, self._parked = self._parked, set()
                for uid in parked:
                    self._enqueue(uid)
            await asyncio.sleep(self.settings.retry_unschedulable_s)

    async def _event_worker(self) -> None:
        while True:
            u = await self._events.get()
            if u.uid not in self._pending:
                continue
            try:
                await self.client.create(EVENTS, self._event(u), u.namespace)
                self.metrics.events.labels("FailedScheduling").inc()
            except KubeError as e:
                log.info("could not record FailedScheduling for %s/%s: %s", u.namespace, u.name, e)

    def _event(self, u: Unschedulable) -> Obj:
        now = format_time()
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{u.name}.", "namespace": u.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": u.namespace,
                "name": u.name,
                "uid": u.uid,
            },
            "reason": "FailedScheduling",
            "message": u.message,
            "type": "Warning",
            "source": {"component": self.settings.component},
            "reportingComponent": self.settings.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

    # --- introspection (tests, /readyz) -------------------------------------------------
    def counts(self) -> dict[str, int]:
        return {
            "pending": len(self._pending),
            "queued": len(self._queue),
            "inflight": len(self._inflight),
            "parked": len(self._parked),
            "retrying": len(self._failures),
        }


def _condition(pod: Obj, kind: str) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind:
            return c
    return None


def _is_true(condition: dict[str, Any] | None) -> bool:
    return condition is not None and condition.get("status") == "True"


def _condition_time(pod: Obj, kind: str) -> float | None:
    c = _condition(pod, kind)
    return None if c is None else epoch_seconds(c.get("lastTransitionTime"))
