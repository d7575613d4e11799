"""How many creates may be unanswered at once. Pre-placed: placements are asked for only
when their creates can go out, and the window's capacity follows the rate the API server
grants (:class:`WindowSizing`); unbound (binder mode, groups, what pre-placed left): no more
in flight than the server's queue holds, so an overload costs few 429s (facade/unbound.py,
``ServiceSettings.unbound_in_flight``).

Why: a placement is good for about a second (kube/placement.py, ``send_by``). The client's
token bucket runs at its ceiling (1,000/s) while the API server grants ~500/s and answers
within its own short queue, so the creates the tokens let through pile up in the client's
connection pool instead. In the reference burst ~80% of the placements ran out in that
pile and the pods went to the binder (docs/benchmarks/burst.md, issue 16). Bounding what is in
flight bounds the pile: a batch asks the leader only when the window has room for it, so
the time from the answer to the send is at most the window over the rate the server
grants, whatever the client's token rate.

Why the capacity follows the grant: a fixed window is sized for one rate. 200 creates are
0.4 s of the reference's 500/s, but 1 s of a level granting 200/s, whose queue holds
~50 (200/s x 0.25 s): the creates past it were answered 429 (5.8-7.1% of the writes,
docs/benchmarks/burst.md). :class:`WindowSizing` makes the capacity the grant the client's
pacer has seen (kube/ratelimit.py, ``AdaptivePacer.grant``: the successes of the last
second, once the server has refused one of our requests) times ``queue_s``, between a
floor and the configured maximum; a pre-placed batch larger than that goes in parts
(facade/preplaced.py).
Not the pacer's own rate: one decrease at most halves it and the fast answers of the
server's refilled burst raise it again, so it stayed near twice the grant and a window
sized from it still drew 5.6% 429s at 200/s. Not before the server refused anything: then
the successes are only what we asked — on a machine that cannot keep up with the grant
(the reference burst: ~350 creates/s of 500/s granted) — and the capacity is the maximum.
Sized from its own successes the window corrects itself: it grows while creates are
answered within ``queue_s`` (in flight / throughput = the answer's time) and shrinks
while the server queues them longer.

Waiters are served in arrival order (a batch is never overtaken by smaller ones behind
it); a request for more than the whole window waits for an empty window and takes it —
the capacity *at grant time*, so a window shrunk under a waiter still serves it. (A
pre-placed batch larger than the capacity is sent in parts that fit: facade/preplaced.py.)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sandman.base.settings import setting

__all__ = ["SendWindow", "WindowSizing"]


@dataclass(frozen=True, slots=True)
class WindowSizing:
    """The pre-placed window's capacity from the grant seen (module docstring)."""

    maximum: int = setting(
        200,
        help="never more (and the capacity while no grant is known: nothing refused yet, or no "
        "pacer)",
    )
    minimum: int = setting(
        32,
        help="never less: after a pause a few creates still go at once, and their answers size "
        "the window again",
    )
    queue_s: float = setting(
        0.25,
        help="how much of the grant the window holds: about what the server queues before it "
        "answers 429 (APF's queues; 0.25 s in the reference profile), well inside a "
        "placement's ~1 s: ~50 at 200/s",
    )

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError("window sizing needs 1 <= minimum <= maximum")
        if self.queue_s <= 0:
            raise ValueError("window sizing needs queue_s > 0")

    def capacity(self, grant: float | None) -> int:
        """For a ``grant`` (requests/s); None: not known — the maximum."""
        if grant is None:
            return self.maximum
        return min(self.maximum, max(self.minimum, math.ceil(grant * self.queue_s)))


class SendWindow:
    """``capacity`` slots; :meth:`hold` takes ``n`` of them (FIFO) until the block ends;
    :meth:`resize` changes the capacity for the grants from then on."""

    def __init__(self, capacity: int) -> None:
        _check(capacity)
        self.capacity = capacity
        self.in_flight = 0
        #: The most slots held at once so far (for metrics and tests).
        self.peak = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[int]]] = collections.deque()

    def resize(self, capacity: int) -> None:
        """Holders keep what they hold (a shrink below it only delays the next grants); a
        grow serves the waiters that now fit."""
        _check(capacity)
        self.capacity = capacity
        self._wake()

    @contextlib.asynccontextmanager
    async def hold(self, n: int) -> AsyncIterator[None]:
        taken = await self._take(max(n, 0))
        try:
            yield
        finally:
            self.in_flight -= taken
            self._wake()

    def _fits(self, n: int) -> int | None:
        """The slots a request for ``n`` takes if granted now, or None."""
        take = min(n, self.capacity)
        return take if self.in_flight + take <= self.capacity else None

    def _grant(self, take: int) -> int:
        self.in_flight += take
        self.peak = max(self.peak, self.in_flight)
        return take

    async def _take(self, n: int) -> int:
        if not self._waiters and (take := self._fits(n)) is not None:
            return self._grant(take)
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        entry = (n, waiter)
        self._waiters.append(entry)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.in_flight -= waiter.result()  # granted just as we were cancelled
            else:
                with contextlib.suppress(ValueError):  # not popped by _wake yet
                    self._waiters.remove(entry)
            self._wake()
            raise

    def _wake(self) -> None:
        while self._waiters:
            n, waiter = self._waiters[0]
            if waiter.done():
                self._waiters.popleft()
                continue
            take = self._fits(n)
            if take is None:
                return
            self._waiters.popleft()
            waiter.set_result(self._grant(take))


def _check(capacity: int) -> None:
    if capacity < 1:
        raise ValueError("capacity must be >= 1")
