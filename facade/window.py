"""How many creates may be unanswered at once. Pre-placed: placements are asked for only
when their creates can go out; unbound (binder mode): no more in flight than the server's
queue holds, so an overload costs few 429s (facade/service.py, ``unbound_in_flight``).

Why: a placement is good for about a second (kube/placement.py, ``send_by``). The client's
token bucket runs at its ceiling (1,000/s) while the API server grants ~500/s and answers
within its own short queue, so the creates the tokens let through pile up in the client's
connection pool instead. In the reference burst ~80% of the placements ran out in that
pile and the pods went to the binder (docs/benchmarks/burst.md, issue 16). Bounding what is in
flight bounds the pile: a batch asks the leader only when the window has room for it, so
the time from the answer to the send is at most the window over the rate the server
grants (200 / 500 per s = 0.4 s), whatever the client's token rate.

Waiters are served in arrival order (a batch is never overtaken by smaller ones behind
it); a request for more than the whole window waits for an empty window and takes it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator

__all__ = ["SendWindow"]


class SendWindow:
    """``capacity`` slots; :meth:`hold` takes ``n`` of them (FIFO) until the block ends."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.in_flight = 0
        #: The most slots held at once so far (for metrics and tests).
        self.peak = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @contextlib.asynccontextmanager
    async def hold(self, n: int) -> AsyncIterator[None]:
        n = min(max(n, 0), self.capacity)
        await self._take(n)
        try:
            yield
        finally:
            self.in_flight -= n
            self._wake()

    async def _take(self, n: int) -> None:
        if not self._waiters and self.in_flight + n <= self.capacity:
            self.in_flight += n
            self.peak = max(self.peak, self.in_flight)
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (n, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.in_flight -= n  # granted just as we were cancelled: give it back
            else:
                with contextlib.suppress(ValueError):  # not popped by _wake yet
                    self._waiters.remove(entry)
            self._wake()
            raise

    def _wake(self) -> None:
        while self._waiters and self.in_flight + self._waiters[0][0] <= self.capacity:
            n, waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self.in_flight += n
            self.peak = max(self.peak, self.in_flight)
            waiter.set_result(None)
