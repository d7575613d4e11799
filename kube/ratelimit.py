"""A client-side token bucket (client-go's ``flowcontrol.NewTokenBucketRateLimiter``).

Why on the client: the API server is shared; Sandman must stay inside its budget instead of
discovering it through 429s. Waiters are served in arrival order: each ``acquire`` reserves
the next token time under no lock (a single event loop) and sleeps until then, so N
concurrent callers are spread evenly at ``qps`` without a thundering herd.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """``qps`` tokens per second, at most ``burst`` saved up. ``qps == 0``: unlimited."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(burst, 1)
        self._clock = clock
        self._tokens = float(self.burst)
        self._stamp = clock()

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
