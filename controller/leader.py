"""Lease-based leader election (coordination.k8s.io/v1), client-go's algorithm and defaults.

Why: one controller binds at a time (two binders would race for the same capacity), but
standbys must keep warm caches and take over within seconds. The algorithm is client-go's
``leaderelection`` package, so its guarantees carry over:

- **try acquire or renew**: read the Lease. If another holder's record is still *valid* —
  judged by when *we* last saw the record change (``observed_at``) plus its
  ``leaseDurationSeconds``, on our own monotonic clock, never by comparing wall clocks —
  give up for now. Otherwise write ourselves in with optimistic concurrency
  (``resourceVersion``): if two candidates race, one gets 409 and stays a standby.
  Leader transitions count up when the holder changes; ``acquireTime`` is kept on renew.
- **acquire**: try every ``retry_period`` (with client-go's 1.2 jitter) until it works.
- **renew**: every ``retry_period``. If no renewal has succeeded for ``renew_deadline``, stop
  leading at once. ``renew_deadline < lease_duration``, so a leader that cannot reach the
  API server stops acting before any standby can consider the lease expired.
- **release** on a clean stop: write an empty holder with a 1 s duration so a standby takes
  over without waiting out the lease.

Two departures from client-go, both for failover in seconds (docs/controller.md, "Leader
election"):

- **A candidate tries again the moment the record it saw runs out** (or after
  ``retry_period``, whichever is sooner), not a whole retry period later.
- **Renewals are timed from the start of the attempt that succeeded**, not its end: the
  leader stops acting ``renew_deadline`` after the last write it *sent* that the server
  took, so a standby can bound how long ago a silent leader must have stopped
  (:attr:`LeaderElector.predecessor_quiet_s`): at least ``leaseDurationSeconds -
  renew_deadline`` before the standby could take over (the same settings on every
  replica, as one Deployment gives them).

Defaults: a 3 s lease, 2 s renew deadline and 0.5 s retry period, against client-go's
15/10/2: a SIGKILLed leader is replaced within ~3.5 s instead of ~17 s. The cost is the
renewals: a GET and a PUT of one small object every 0.5 s (4 requests/s, 2 of them writes),
in the manifests' own `sandman-election` priority level, so a burst's writes never delay
them. Each attempt is one request (``max_attempts=1`` on the elector's client): a 429 is
retried by the loop at the next retry period, not after a Retry-After that would outlast
the deadline.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kube import LEASES, Conflict, KubeClient, KubeError, NotFound
from kube.times import format_micro_time
from sandman.base.settings import setting

__all__ = ["ElectionSettings", "LeaderElector"]

log = logging.getLogger(__name__)
JITTER = 1.2  # client-go's JitterFactor


@dataclass(frozen=True, slots=True)
class ElectionSettings:
    name: str = setting("sandman-controller", help="the election Lease")
    namespace: str = setting("sandman-system", help="the election Lease's namespace")
    identity: str = setting(
        "",
        help='this candidate\'s name in the Lease, unique per process; "": hostname_pid '
        "(controller.app.default_identity)",
    )
    lease_duration_s: float = setting(
        3.0,
        help="how long a leader's Lease holds without renewal: a killed leader is replaced in "
        "~3.5-4 s (client-go's defaults: 15, 10, 2 s)",
    )
    renew_deadline_s: float = setting(
        2.0, help="a leader that has not renewed within this steps down"
    )
    retry_period_s: float = setting(0.5, help="between attempts to acquire or renew")
    release_on_cancel: bool = setting(
        True, help="release the Lease on a clean stop, so a standby takes over at once"
    )

    def __post_init__(self) -> None:
        if self.lease_duration_s <= self.renew_deadline_s:
            raise ValueError("lease_duration_s must be greater than renew_deadline_s")
        if self.renew_deadline_s <= JITTER * self.retry_period_s:
            raise ValueError("renew_deadline_s must be greater than retry_period_s * 1.2")
        if self.retry_period_s <= 0:
            raise ValueError("retry_period_s must be > 0")


class LeaderElector:
    """``await elector.run(lead)``: wait to be leader, run ``lead()`` while leading, return
    when leadership is lost (``lead`` is cancelled first), ``lead`` returns, or on
    :meth:`stop`. Callers that lose leadership should start over with fresh state."""

    def __init__(
        self,
        client: KubeClient,
        settings: ElectionSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not settings.identity:
            raise ValueError("identity must be set (unique per candidate)")
        self.client = client
        self.settings = settings
        self._clock = clock
        self._observed: dict[str, Any] | None = None  # the Lease as last read/written
        self._observed_spec: dict[str, Any] = {}
        self._observed_at = 0.0
        self.leading = asyncio.Event()
        #: Set once an attempt has read or written the Lease: we know who leads.
        self.known = asyncio.Event()
        self._stopping = asyncio.Event()
        #: Written on the Lease with every acquire and renewal (the placement URL: what a
        #: facade needs to reach the leader, controller/placement.py).
        self.annotations: dict[str, str] = {}
        #: When we last acquired: at least how long ago the previous holder must have
        #: stopped acting (0 when it may still have been acting: a released lease, ours).
        self.predecessor_quiet_s = 0.0
        self._attempt_started = 0.0

    # --- observation ----------------------------------------------------------------------
    @property
    def leader(self) -> str:
        """The holder we last observed ("" if none)."""
        return str(self._observed_spec.get("holderIdentity") or "")

    def is_leader(self) -> bool:
        return self.leader == self.settings.identity

    def _observe(self, lease: dict[str, Any]) -> None:
        self.known.set()
        spec = dict(lease.get("spec") or {})
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self._clock()
        self._observed = lease

    def _lease_valid(self, now: float) -> bool:
        duration = float(self._observed_spec.get("leaseDurationSeconds") or 0)
        return self._observed_at + duration > now

    # --- one attempt ----------------------------------------------------------------------
    def _quiet_s(self, old: dict[str, Any], now: float) -> float:
        """How long ago a holder whose record ran out must have stopped acting: it stops
        ``renew_deadline`` after its last accepted renewal was sent, and we saw that
        renewal ``leaseDurationSeconds`` ago or more."""
        holder = old.get("holderIdentity")
        if not holder or holder == self.settings.identity:
            return 0.0
        # Its last accepted renewal was sent before we first saw it (_observed_at).
        return max(0.0, now - self._observed_at - self.settings.renew_deadline_s)

    def next_attempt_in(self, now: float) -> float:
        """A standby's wait before its next try: the retry period (jittered), or less if
        the record it saw runs out sooner."""
        s = self.settings
        wait = s.retry_period_s * (1 + random.random() * (JITTER - 1))
        if self.leader and not self.is_leader():
            duration = float(self._observed_spec.get("leaseDurationSeconds") or 0)
            wait = min(wait, max(0.01, self._observed_at + duration - now))
        return wait

    async def try_acquire_or_renew(self) -> bool:
        s = self.settings
        self._attempt_started = self._clock()
        wall = format_micro_time()
        record = {
            "holderIdentity": s.identity,
            "leaseDurationSeconds": max(1, round(s.lease_duration_s)),
            "acquireTime": wall,
            "renewTime": wall,
            "leaseTransitions": 0,
        }
        try:
            lease = await self.client.get(LEASES, s.name, s.namespace)
        except NotFound:
            meta = {"name": s.name, "namespace": s.namespace, "annotations": self.annotations}
            body = {"metadata": meta, "spec": record}
            try:
                created = await self.client.create(LEASES, body, s.namespace)
            except KubeError as e:
                log.info("lease %s/%s: create failed: %s", s.namespace, s.name, e)
                return False
            self._observe(created)
            self.predecessor_quiet_s = 0.0  # no record of who led before: assume anyone
            return True
        except KubeError as e:
            log.info("lease %s/%s: get failed: %s", s.namespace, s.name, e)
            return False
        self._observe(lease)
        old = self._observed_spec
        if old.get("holderIdentity") and self._lease_valid(self._clock()) and not self.is_leader():
            log.debug("%s: lease held by %s", s.identity, old.get("holderIdentity"))
            return False
        if self.is_leader():
            record["acquireTime"] = old.get("acquireTime") or wall
            record["leaseTransitions"] = int(old.get("leaseTransitions") or 0)
            return await self._write(lease, record)
        record["leaseTransitions"] = int(old.get("leaseTransitions") or 0) + 1
        quiet = self._quiet_s(old, self._clock())
        if not await self._write(lease, record):
            return False
        self.predecessor_quiet_s = quiet
        return True

    async def _write(self, lease: dict[str, Any], spec: dict[str, Any]) -> bool:
        s = self.settings
        meta = dict(lease.get("metadata") or {})
        if self.annotations and spec.get("holderIdentity") == s.identity:
            meta["annotations"] = {**(meta.get("annotations") or {}), **self.annotations}
        body = {**lease, "metadata": meta, "spec": spec}
        try:
            updated = await self.client.replace(LEASES, s.name, body, s.namespace)
        except Conflict:
            return False  # someone else wrote first: re-read next round
        except KubeError as e:
            log.info("lease %s/%s: update failed: %s", s.namespace, s.name, e)
            return False
        self._observe(updated)
        return True

    # --- loops ----------------------------------------------------------------------------
    async def acquire(self) -> None:
        """Return once we hold the lease."""
        s = self.settings
        while True:
            if await self._bounded_try(s.renew_deadline_s):
                log.info("%s: became leader of %s/%s", s.identity, s.namespace, s.name)
                return
            await asyncio.sleep(self.next_attempt_in(self._clock()))

    async def _bounded_try(self, seconds: float) -> bool:
        try:
            async with asyncio.timeout(seconds):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            log.info("%s: lease attempt timed out after %.1fs", self.settings.identity, seconds)
            return False

    async def renew(self) -> None:
        """Renew until a renewal has not succeeded for ``renew_deadline``; then return."""
        s = self.settings
        last_ok = self._attempt_started  # the acquiring attempt's start
        while True:
            await asyncio.sleep(s.retry_period_s)
            remaining = last_ok + s.renew_deadline_s - self._clock()
            if remaining > 0 and await self._bounded_try(remaining):
                last_ok = self._attempt_started  # timed from when the renewal was sent
                continue
            if self._clock() - last_ok >= s.renew_deadline_s or not self.is_leader():
                log.warning("%s: failed to renew lease, stopping leading", s.identity)
                return

    def stop(self) -> None:
        """Ask :meth:`run` to stop (leading or not) and release the lease (clean shutdown)."""
        self._stopping.set()

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Acquire, lead until leadership is lost or :meth:`stop`; return True if we led.

        Cancellation (a crash, SIGKILL) does not release: the lease then runs out."""
        async with asyncio.TaskGroup() as tg:
            acquiring = tg.create_task(self.acquire())
            stopping = tg.create_task(self._stopping.wait())
            await asyncio.wait((acquiring, stopping), return_when=asyncio.FIRST_COMPLETED)
            acquiring.cancel()
            if self._stopping.is_set():
                stopping.cancel()
                return False
            self.leading.set()
            try:
                leading = tg.create_task(lead())
                renewing = tg.create_task(self.renew())
                await asyncio.wait(
                    (leading, renewing, stopping), return_when=asyncio.FIRST_COMPLETED
                )
                for task in (leading, renewing, stopping):
                    task.cancel()
            finally:
                self.leading.clear()
        if self.settings.release_on_cancel and self._stopping.is_set():
            await self.release()
        return True

    async def release(self) -> None:
        """Give the lease up, if we still hold it, so a standby need not wait it out.

        Re-reads first: a renewal cancelled in flight may have landed after our last look,
        which would make a write based on the cached record fail with 409."""
        s = self.settings
        if not self.is_leader():
            return
        try:
            async with asyncio.timeout(s.renew_deadline_s):
                for _ in range(3):
                    lease = await self.client.get(LEASES, s.name, s.namespace)
                    self._observe(lease)
                    if not self.is_leader():
                        return
                    spec = {**self._observed_spec, "holderIdentity": "", "leaseDurationSeconds": 1}
                    if await self._write(lease, spec):
                        log.info("%s: released %s/%s", s.identity, s.namespace, s.name)
                        return
        except (TimeoutError, KubeError) as e:
            log.warning("%s: could not release the lease: %s", s.identity, e)
