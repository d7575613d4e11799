"""The per-node wall on sandbox creation: a rate (creations/s, a token bucket) and a cap on
sandboxes being created at once — the containerd limits public stress tests ran into."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from simcluster.token_bucket import TokenBucket

__all__ = ["CreationLimiter"]


class CreationLimiter:
    def __init__(self, rate: float = 0.0, concurrency: int = 0, burst: float = 1.0) -> None:
        self._bucket = TokenBucket(rate, burst)
        self._sem = asyncio.Semaphore(concurrency) if concurrency else None

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self._bucket.take()
        if self._sem is None:
            yield
            return
        async with self._sem:
            yield
