"""A client-side token bucket (client-go's ``flowcontrol.NewTokenBucketRateLimiter``) and
the pacer that moves its rate to what the server grants.

Why on the client: the API server is shared; Sandman must stay inside its budget instead of
discovering it through 429s. Waiters are served in arrival order: each ``acquire`` reserves
the next token time under no lock (a single event loop) and sleeps until then, so N
concurrent callers are spread evenly at ``qps`` without a thundering herd.

Why adaptive (:class:`AdaptivePacer`): a fixed ``qps`` is either below the server's budget
(wasted) or above it, and then every request past the server's queue is answered 429 and
sent again — 11-14k thrown-away requests in the reference burst. The budget is shared by
the facade replicas and the controller, and none of them knows the others' share, so each
learns its own from the server's answers, as TCP does (additive increase, multiplicative
decrease), with no coordination beyond what the server says to each:

- a 429 lowers the rate to ``decrease_factor`` times what was *granted* over the last
  ``window_s`` (the successes counted; not the rate asked for, which may be far above it),
  but never below half the rate it had, and drops the saved burst — once per overload: the
  429s of requests sent before the decrease are the same overload answering the requests
  in flight, and do not count again; the request's Retry-After is honoured by the retry
  itself. Why a whole window, and why at most a halving: an estimate over the fraction of a
  second since the previous decrease counted two or three answers, and in a create + bind
  burst of the reference size a run of such decreases drove the facade to its 5/s floor
  for 20 s (docs/benchmarks/burst.md, issue 16, 18:15 UTC);
- a success answered within ``slow_answer_s`` raises the rate by ``increase_per_s`` of
  itself per second of successes, up to the configured ``qps``; a slow answer (the server
  is queueing our requests: its budget is spent) holds the rate where it is.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass

from sandman.base.settings import setting

__all__ = ["AdaptivePacer", "PacerSettings", "TokenBucket"]


class TokenBucket:
    """``qps`` tokens per second, at most ``burst`` saved up. ``qps == 0``: unlimited."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(burst, 1)
        self._clock = clock
        self._tokens = float(self.burst)
        self._stamp = clock()

    def set_rate(self, qps: float, *, drop_saved: bool = False) -> None:
        """Change the rate from now on (tokens so far were minted at the old one);
        ``drop_saved``: spend the saved burst too (the server just said no)."""
        now = self._clock()
        if self.qps > 0:
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        self.qps = qps
        if drop_saved:
            self._tokens = min(self._tokens, 0.0)

    def reserve(self) -> float:
        """Take a token (possibly one not yet minted); return the seconds to wait for it."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def try_take(self, n: int = 1) -> float:
        """Take ``n`` tokens only if they are all there now (0.0); otherwise take nothing and
        return the seconds until they will be. For admission: refuse instead of queueing."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        if self._tokens >= n:
            self._tokens -= n
            return 0.0
        return (n - self._tokens) / self.qps

    async def acquire(self) -> float:
        """Wait for a token; return how long we waited."""
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
        return delay


@dataclass(frozen=True, slots=True)
class PacerSettings:
    """AIMD on the client's token bucket (module docstring). ``enabled=False``: fixed qps."""

    enabled: bool = setting(True, help="adaptive pacing; off: the bucket keeps its fixed qps")
    decrease_factor: float = setting(
        0.9,
        help="a 429 lowers the rate to this share of what was granted over window_s",
        dimensionless=True,
    )
    increase_per_s: float = setting(
        0.2,
        help="per second of fast answers the rate grows by this share of itself (at least "
        "1/s): ~90/s near a 500/s budget, ~12/s near 60/s",
    )
    cooldown_s: float = setting(
        0.25,
        help="at most one decrease this often (429s of requests sent before a decrease never "
        "cause another)",
    )
    slow_answer_s: float = setting(
        0.1, help="an answer slower than this holds the rate (the server is queueing)"
    )
    min_qps: float = setting(
        5.0, help="never below this many requests/s (a floor, so recovery does not take minutes)"
    )
    window_s: float = setting(1.0, help="successes counted over this window are the granted rate")

    def __post_init__(self) -> None:
        if not 0 < self.decrease_factor < 1:
            raise ValueError("decrease_factor must be in (0, 1)")
        if min(self.increase_per_s, self.cooldown_s, self.min_qps, self.window_s) <= 0:
            raise ValueError("increase_per_s, cooldown_s, min_qps, window_s must be > 0")


class AdaptivePacer:
    """Moves ``bucket.qps`` between ``min_qps`` and the bucket's initial ``qps`` (the
    ceiling) from the answers: :meth:`answered` after each response, :meth:`throttled`
    after each 429. A bucket with ``qps == 0`` (unlimited) is left alone."""

    def __init__(
        self,
        bucket: TokenBucket,
        settings: PacerSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bucket = bucket
        self.settings = settings or PacerSettings()
        self.ceiling = bucket.qps
        self._clock = clock
        self._ok: collections.deque[float] = collections.deque()
        self._last_change = -float("inf")
        self._last_ok = self._born = clock()
        #: How often the rate was lowered, for metrics and tests.
        self.decreases = 0

    def now(self) -> float:
        return self._clock()

    @property
    def active(self) -> bool:
        return self.settings.enabled and self.ceiling > 0

    def granted(self) -> float:
        """Successes per second over the last ``window_s`` (while the server refuses some of
        our requests, what it admits is its grant), or over our whole life if shorter."""
        now = self._clock()
        self._trim(now)
        if not self._ok:
            return 0.0
        span = min(self.settings.window_s, now - self._born)
        return len(self._ok) / max(span, self.settings.window_s / 10)

    def grant(self) -> float | None:
        """The server's grant as far as it has shown it: :meth:`granted` once it refused
        one of our requests (a 429 lowered the rate); None before, or when not pacing —
        then what it admitted is only what we asked, and its grant may be anything above."""
        return self.granted() if self.active and self.decreases else None

    def _trim(self, now: float) -> None:
        horizon = now - self.settings.window_s
        while self._ok and self._ok[0] < horizon:
            self._ok.popleft()

    def answered(self, seconds: float) -> None:
        """A request succeeded (any answer but 429) after ``seconds``."""
        if not self.active:
            return
        s, now = self.settings, self._clock()
        self._ok.append(now)
        if len(self._ok) > 4 * self.ceiling * s.window_s:
            self._trim(now)
        elapsed, self._last_ok = now - self._last_ok, now
        qps = self.bucket.qps
        if seconds <= s.slow_answer_s and qps < self.ceiling:
            step = max(1.0, qps * s.increase_per_s) * min(elapsed, s.cooldown_s)
            self.bucket.set_rate(min(self.ceiling, qps + step))

    def throttled(self, sent_at: float | None = None) -> None:
        """The server answered 429 to a request sent at ``sent_at`` (this clock; None: just
        now): lower the rate to a share of what it granted — unless the request was sent
        before the last decrease (the same overload, already answered)."""
        if not self.active:
            return
        s, now = self.settings, self._clock()
        if sent_at is not None and sent_at <= self._last_change:
            return
        if now - self._last_change < s.cooldown_s:
            return
        granted = self.granted()
        self._last_change = now
        qps = self.bucket.qps
        base = min(qps, granted) if granted > 0 else qps
        lowered = max(s.min_qps, base * s.decrease_factor, qps / 2)
        self.bucket.set_rate(min(qps, lowered), drop_saved=True)
        self.decreases += 1
