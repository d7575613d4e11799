"""Garbage collection of sandbox pods: the controller's other job (first part).

Trainers crash, pods fail, nodes die; nothing may leak. While leading, the collector scans
the informer caches (no API reads) every ``interval_s`` and deletes sandbox pods
(``schedulerName: sandman``) for one of these reasons, each counted in
``sandman_gc_deletions_total{reason}`` and reported with an Event on the pod:

| reason | when |
|---|---|
| ``expired`` | the ``expires_annotation`` (RFC 3339 time) has passed |
| ``idle`` | the daemon's idle exit: Succeeded, exit codes 0, ``idle_annotation`` set (*) |
| ``terminal`` | any other end: Failed, or Succeeded without an idle timeout (*) |
| ``pending-timeout`` | not bound ``pending_deadline_s`` after creation |
| ``node-gone`` | bound to a node that has not existed for ``node_gone_grace_s`` (force delete) |
| ``owner-expired`` | the owner's Lease expired (:mod:`controller.owners`): deletecollection |

A claimed pool sandbox's expiry, idle timeout and owner are its SandboxClaim's
(controller/claim_life.py): the same reasons apply to it, read from the claim. A claim none
of whose pods is left is deleted after ``claim_grace_s`` (``sandman_gc_claims_deleted``).

(*) after ``terminal_retention_s``. The daemon exits 0 once its idle timeout
(``sandman.io/idle-timeout-seconds``, written by the facade) passes with no request, so
``idle`` is a sandbox the trainer forgot, not one that broke.

Deletes carry the pod's uid as precondition (a recreated pod of the same name is never hit)
and go through a token bucket of their own (``qps``), so cleanup never starves binding.

Why the scan examines only candidates (:class:`Candidates`): it used to walk every cached pod
every ``interval_s``, so during a burst bound by the API server's pace its cost grew with the
pods cached *and* with the burst's duration (n²): at 50,000 sandboxes over 2,000 nodes it was
the controller's largest super-linear cost. Now the informer handlers keep, per sandbox, the
wall time its ``expired`` or ``pending-timeout`` reason would become due (a heap), the
terminal sandboxes and the sandboxes by node, so a scan looks at the pods whose time came,
the terminal ones and those of missing nodes: the same verdicts, from the same code, at a
cost that does not grow with the healthy pods.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from controller.claim_life import ClaimedPods
from controller.collector_index import Candidates
from controller.metrics import ControllerMetrics
from controller.owners import OwnerLeases
from controller.view import ClusterView
from kube import EVENTS, PODS, KubeClient, KubeError, NotFound
from kube.cache import Obj
from kube.contract import ANNOTATION_EXPIRES_AT, ANNOTATION_IDLE_TIMEOUT
from kube.informer import Informer
from kube.pool_contract import SANDBOX_CLAIMS
from kube.times import epoch_seconds, format_time
from sandman.base.settings import fixed, setting

__all__ = ["GCSettings", "GarbageCollector"]

log = logging.getLogger(__name__)
_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class GCSettings:
    interval_s: float = setting(
        5.0,
        help="between scans; a scan looks at the candidates only (due, terminal, on a missing "
        "node: controller/collector_index.py), not at every cached pod",
    )
    terminal_retention_s: float = setting(
        60.0, help="a finished sandbox (Succeeded or Failed) is kept this long, then collected"
    )
    pending_deadline_s: float = setting(
        600.0, help="a sandbox not bound this long after its creation is collected"
    )
    node_gone_grace_s: float = setting(
        30.0, help="a sandbox bound to a node missing this long is force-deleted"
    )
    expires_annotation: str = fixed(
        ANNOTATION_EXPIRES_AT, why="the contract's name (kube/contract.py): the facade writes it"
    )
    idle_annotation: str = fixed(
        ANNOTATION_IDLE_TIMEOUT,
        why="the contract's name (kube/contract.py): a Succeeded sandbox with it ended by its "
        "daemon's idle timeout",
    )
    claim_grace_s: float = setting(
        300.0,
        help="a SandboxClaim none of whose pods has been seen this long is deleted: longer than "
        "the watch's lag behind a new claim and than a trainer's retries of its create (a "
        "retry that finds the claim gets its sandboxes back)",
    )
    qps: float = setting(
        20.0, help="deletes (and their Events) per second, from a token bucket of their own"
    )
    burst: int | None = setting(
        None, help="the deletes' bucket size", derived="one second of deletes, max(1, int(qps))"
    )
    component: str = fixed(
        "sandman-controller", why="the source of its Events (FacadeSettings.controller_component)"
    )

    @property
    def bucket_burst(self) -> int:
        """``burst``, or (not given) one second of deletes."""
        return self.burst if self.burst is not None else max(1, int(self.qps))


class GarbageCollector:
    def __init__(
        self,
        client: KubeClient,
        view: ClusterView,
        settings: GCSettings | None = None,
        metrics: ControllerMetrics | None = None,
        *,
        claims: Informer | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = s = settings or GCSettings()
        self.client = client.with_rate_limit(s.qps, s.bucket_burst)
        self.view = view
        self.metrics = metrics or ControllerMetrics()
        self._clock, self._wall = clock, wall
        #: The claims of pool pods (the claim service's informer); None: no pools.
        self.claimed = (
            None
            if claims is None
            else ClaimedPods(claims, self._pod_known, grace_s=s.claim_grace_s, clock=clock)
        )
        self.owners = OwnerLeases(view, clock=clock, claimed=self.claimed)
        self._first_seen: dict[tuple[str, str], float] = {}  # (reason key, uid/node) -> t
        self._deleting: set[str] = set()
        self._candidates = Candidates(
            view, s.expires_annotation, s.pending_deadline_s, expiry=self._expiry_of
        )
        if self.claimed is not None:
            self.claimed.on_change = self._candidates.refresh
        #: Pods the last scan looked at (its cost: candidates, not every cached pod).
        self.examined = 0

    async def run(self) -> None:
        await self.view.wait_synced()
        while True:
            for lease, owner in self.owners.expired():
                await self._collect_owner(lease, owner)
            due = list(self.candidates())
            self.metrics.gc_backlog.set(len(due))
            for pod, reason in due:
                await self._delete(pod, reason)
            if self.claimed is not None:
                for namespace, name in list(self.claimed.spent()):
                    await self._delete_claim(namespace, name)
            await asyncio.sleep(self.settings.interval_s)

    def _pod_known(self, namespace: str, name: str) -> bool:
        key = f"{namespace}/{name}"
        return self.view.bound.cache.get(key) is not None or (
            self.view.pending.cache.get(key) is not None
        )

    def _expiry_of(self, pod: Obj) -> str | None:
        annotation = self.settings.expires_annotation
        if self.claimed is None:
            return (pod["metadata"].get("annotations") or {}).get(annotation)
        return self.claimed.expires_at(pod, annotation)

    async def _delete_claim(self, namespace: str, name: str) -> None:
        """A claim whose pods are all gone (controller/claim_life.py): nothing lingers."""
        try:
            await self.client.delete(SANDBOX_CLAIMS, name, namespace)
        except NotFound:
            pass
        except KubeError as e:
            log.warning("gc: deleting SandboxClaim %s/%s failed: %s", namespace, name, e)
            return
        self.metrics.gc_claims_deleted.inc()
        log.info("gc: deleted SandboxClaim %s/%s (its pods are gone)", namespace, name)

    async def _collect_owner(self, lease: Obj, owner: str) -> None:
        try:
            n, preps = await self.owners.collect(self.client, lease, owner)
        except KubeError as e:
            log.warning("gc: deleting the sandboxes of owner %s failed: %s", owner, e)
            return
        self.metrics.gc_deletions.labels("owner-expired").inc(n)
        log.info(
            "gc: owner %s's lease expired: deleted %d sandboxes, %d preparations", owner, n, preps
        )
        message = f"{n} sandboxes of owner {owner}"
        if preps:
            message += f" and {preps} image preparations"
        await self._event(
            lease, "owner-expired", message, kind="Lease", api_version="coordination.k8s.io/v1"
        )

    # --- what to delete -----------------------------------------------------------------
    def _ours(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return spec.get("schedulerName") == self.view.settings.scheduler_name and not (
            pod["metadata"].get("deletionTimestamp")
        )

    def _since(self, key: tuple[str, str], now: float) -> float:
        return now - self._first_seen.setdefault(key, now)

    def candidates(self) -> Iterator[tuple[Obj, str]]:
        """(pod, reason) for every sandbox pod due for deletion now."""
        s, now, wall = self.settings, self._clock(), self._wall()
        seen: set[tuple[str, str]] = set()
        nodes = self.view.nodes.cache
        bound, pending = self._candidates.for_scan(wall, nodes)
        self.examined = len(bound) + len(pending)
        for pod in bound:
            uid = pod["metadata"]["uid"]
            if not self._ours(pod) or uid in self._deleting:
                continue
            reason = self._expired(pod, wall)
            if reason is None and (pod.get("status") or {}).get("phase") in _TERMINAL:
                key = ("terminal", uid)
                seen.add(key)
                if self._since(key, now) >= s.terminal_retention_s:
                    reason = "idle" if self._idle_exit(pod) else "terminal"
            node = pod["spec"].get("nodeName", "")
            if reason is None and node not in nodes:
                key = ("node-gone", uid)
                seen.add(key)
                if self._since(key, now) >= s.node_gone_grace_s:
                    reason = "node-gone"
            if reason is not None:
                yield pod, reason
        for pod in pending:
            if not self._ours(pod) or (pod.get("spec") or {}).get("nodeName"):
                continue
            if pod["metadata"]["uid"] in self._deleting:
                continue
            reason = self._expired(pod, wall)
            created = epoch_seconds(pod["metadata"].get("creationTimestamp"))
            if reason is None and created is not None and wall - created >= s.pending_deadline_s:
                reason = "pending-timeout"
            if reason is not None:
                yield pod, reason
        for key in [k for k in self._first_seen if k not in seen]:
            del self._first_seen[key]  # the condition went away (pod gone, node back)
        known = self._candidates.known
        self._deleting = {uid for uid in self._deleting if known(uid)}  # deleted pods left

    def _idle_exit(self, pod: Obj) -> bool:
        """The sandbox daemon exited 0 after its idle timeout: the pod Succeeded, it had an
        idle timeout, and every container ended with exit code 0."""
        status = pod.get("status") or {}
        annotations = pod["metadata"].get("annotations") or {}
        idle = self.settings.idle_annotation
        had_idle = (
            self.claimed.idle_timeout(pod, idle)
            if self.claimed is not None
            else bool(annotations.get(idle))
        )
        if status.get("phase") != "Succeeded" or not had_idle:
            return False
        codes = [
            ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
            for cs in status.get("containerStatuses") or ()
        ]
        return bool(codes) and all(code == 0 for code in codes)

    def _expired(self, pod: Obj, wall: float) -> str | None:
        at = epoch_seconds(self._expiry_of(pod))
        return "expired" if at is not None and at <= wall else None

    # --- deleting -----------------------------------------------------------------------
    async def _delete(self, pod: Obj, reason: str) -> None:
        meta = pod["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        grace = 0 if reason == "node-gone" else None  # no kubelet will confirm the stop
        self._deleting.add(uid)
        try:
            await self.client.delete(PODS, name, ns, uid=uid, grace_period_s=grace)
        except NotFound:
            return
        except KubeError as e:
            self._deleting.discard(uid)  # try again next round
            log.warning("gc: deleting %s/%s (%s) failed: %s", ns, name, reason, e)
            return
        self.metrics.gc_deletions.labels(reason).inc()
        log.info("gc: deleted %s/%s (%s)", ns, name, reason)
        await self._event(pod, reason)

    async def _event(
        self, obj: Obj, reason: str, what: str = "", *, kind: str = "Pod", api_version: str = "v1"
    ) -> None:
        """A ``SandboxDeleted`` Event on ``obj``, of ``kind`` (given, not read from ``obj``:
        the items of a list response carry no ``kind``, so a Lease from the informer's first
        list would be named a Pod, and the facade would miss the owner's expiry)."""
        meta = obj["metadata"]
        message = f"deleted by the sandbox garbage collector: {reason}"
        now = format_time()
        event = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": api_version,
                "kind": kind,
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "reason": "SandboxDeleted",
            "message": f"{message} ({what})" if what else message,
            "type": "Normal",
            "source": {"component": self.settings.component},
            "reportingComponent": self.settings.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.client.create(EVENTS, event, meta["namespace"])
            self.metrics.events.labels("SandboxDeleted").inc()
        except KubeError as e:
            log.info("gc: could not record an Event for %s: %s", meta["name"], e)
