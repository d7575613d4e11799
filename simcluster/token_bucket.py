"""A token bucket for simcluster's own pacing: the kubelets' creation rate and the default
scheduler's client QPS. One definition for both (the scheduler had written a second copy)."""

from __future__ import annotations

import asyncio
import time

__all__ = ["TokenBucket"]


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved; ``rate`` <= 0: no limit."""

    def __init__(self, rate: float, burst: float = 1.0) -> None:
        self.rate, self.burst = rate, max(float(burst), 1.0)
        self._tokens, self._stamp = self.burst, time.monotonic()

    async def take(self) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= 1.0
        if self._tokens < 0:  # waiting for the token is what the limit is
            await asyncio.sleep(-self._tokens / self.rate)
