"""The per-node wall on sandbox creation: a rate (creations/s, a token bucket) and a cap on
sandboxes being created at once — the containerd limits public stress tests ran into."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

__all__ = ["CreationLimiter"]


class CreationLimiter:
    def __init__(self, rate: float = 0.0, concurrency: int = 0, burst: float = 1.0) -> None:
        self.rate = rate
        self.burst = max(burst, 1.0)
        self._tokens = self.burst
        self._stamp = time.monotonic()
        self._sem = asyncio.Semaphore(concurrency) if concurrency else None

    async def _token(self) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= 1.0
        if self._tokens < 0:
            await asyncio.sleep(-self._tokens / self.rate)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self._token()
        if self._sem is None:
            yield
            return
        async with self._sem:
            yield
