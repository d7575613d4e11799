"""The agent's Events, and the refused ones held and sent again.

Why: an Event is the agent's only report of a failure streak (one per streak, on its Node),
and a refused one (403: the agent's Role lost ``create`` on events) used to be dropped.
Worse, the refusal it left in :attr:`daemon.node.access.ApiAccess.refused` kept the agent's
``/readyz`` at 503 ``forbidden`` until some later streak happened to write an Event —
possibly never — after the operator had restored the rule. So a refused Event is held here
and sent again on the agent's renewal cadence with backoff
(:attr:`daemon.node.settings.AgentSettings.event_backoff`: the first retry within one
``renew_interval_s``, doubling to four); the retry that works records it — late, with its
original timestamps, but not lost — and clears the refusal like any call of that kind.

While Events are held, new ones queue behind them (in order, and without a 403 each) and
go with the next retry. The queue is bounded (``max_held_events``): when full the oldest is
dropped, counted in ``sandman_node_agent_events_dropped_total{reason}`` and logged. Held
Events live in memory only: a restart loses them (it also clears the refusal; a new streak
probes the permission again). An Event that fails otherwise (no answer, a 5xx after the
client's retries) is dropped as before: its create may have happened, and a duplicate
Warning is not worth a retry loop over an ambiguous answer.

The create itself is the caller's (``send``): daemon/node/agent.py makes it, where
tests/manifests/test_rbac.py's scan of call sites expects it.
"""

from __future__ import annotations

import collections
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from daemon.node.metrics import AgentMetrics
from daemon.node.settings import AgentSettings
from kube.errors import Forbidden, KubeError

__all__ = ["EventRecorder"]

log = logging.getLogger(__name__)

Body = dict[str, Any]


class EventRecorder:
    """Sends Events through ``send``; holds refused ones and sends them again when
    :meth:`due_in` says so (:meth:`retry`)."""

    def __init__(
        self,
        send: Callable[[Body], Awaitable[object]],
        settings: AgentSettings,
        metrics: AgentMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._send = send
        self.settings = settings
        self.metrics = metrics
        self._clock = clock
        self._rng = rng or random.Random()
        #: Refused Events, oldest first, to be sent again.
        self.held: collections.deque[Body] = collections.deque()
        self._attempts = 0
        self._retry_at = 0.0

    @property
    def _who(self) -> str:
        return self.settings.node_name

    async def record(self, body: Body) -> None:
        """Send ``body`` now, or behind the held Events if there are any."""
        if self.held:
            self._hold(body)
            return
        if await self._refused(body):
            self._hold(body)
            self._schedule()

    def due_in(self) -> float:
        """Seconds until :meth:`retry` has something to do (``inf``: nothing held)."""
        if not self.held:
            return float("inf")
        return max(0.0, self._retry_at - self._clock())

    async def retry(self) -> None:
        """If due: send the held Events, oldest first, until one is refused again."""
        if self.due_in() > 0:
            return
        sent = 0
        while self.held:
            body = self._take()
            if await self._refused(body):
                self._hold(body, front=True)
                self._schedule()
                return
            sent += 1
        self._attempts = 0
        log.info("%s: %d held Event(s) sent", self._who, sent)

    # --- the queue ----------------------------------------------------------------------
    async def _refused(self, body: Body) -> bool:
        """One create; True if it was refused (403: the caller holds it), False if it was
        sent or failed otherwise (dropped)."""
        reason = str(body.get("reason", ""))
        try:
            await self._send(body)
        except Forbidden:
            self.metrics.errors.labels("kube").inc()
            return True  # logged once, by the client
        except KubeError as e:
            self.metrics.errors.labels("kube").inc()
            what = str(body.get("message", reason))[:200]
            log.info("%s: could not record an Event (%s): %s", self._who, what, e)
            return False
        self.metrics.events.labels(reason).inc()
        return False

    def _schedule(self) -> None:
        self._attempts += 1
        delay = self.settings.event_backoff.delay(self._attempts, None, self._rng)
        self._retry_at = self._clock() + delay

    def _take(self) -> Body:
        self.metrics.events_held.dec()
        return self.held.popleft()

    def _hold(self, body: Body, *, front: bool = False) -> None:
        if front:
            self.held.appendleft(body)
        else:
            self.held.append(body)
        self.metrics.events_held.inc()
        while len(self.held) > self.settings.max_held_events:
            oldest = self._take()
            reason = str(oldest.get("reason", ""))
            self.metrics.events_dropped.labels(reason).inc()
            log.warning(
                "%s: %d Events held (refused), dropped the oldest: %s",
                self._who, len(self.held) + 1, oldest.get("message", ""),
            )  # fmt: skip
