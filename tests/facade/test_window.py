"""The send window (facade/window.py): at most ``capacity`` slots held, waiters served in
arrival order (a large batch is not overtaken by small ones), a request above the capacity
takes the whole window, and a cancelled waiter gives back what it held or waited for — also
while the capacity moves (``resize``: hypothesis drives holds, releases, cancels and
resizes), and the capacity follows the grant seen (``WindowSizing``)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from facade.window import SendWindow, WindowSizing
from tests.support.wait import wait_until_async


async def _hold(window: SendWindow, n: int, order: list[int], release: asyncio.Event) -> None:
    async with window.hold(n):
        order.append(n)
        await release.wait()


@pytest.mark.anyio
async def test_waiters_are_served_in_order_within_the_capacity() -> None:
    window, order = SendWindow(4), []
    first, rest = asyncio.Event(), asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(_hold(window, 3, order, first))
        await asyncio.sleep(0)
        tg.create_task(_hold(window, 4, order, rest))  # must wait for the 3 to go
        await asyncio.sleep(0)
        tg.create_task(_hold(window, 1, order, rest))  # fits now, but arrived after the 4
        for _ in range(3):
            await asyncio.sleep(0)
        assert (order, window.in_flight) == ([3], 3)
        first.set()
        await wait_until_async(lambda: 4 in order)
        assert window.in_flight == 4
        rest.set()
    assert (order, window.in_flight) == ([3, 4, 1], 0)


@pytest.mark.anyio
async def test_a_request_above_the_capacity_takes_the_whole_window() -> None:
    window, order, release = SendWindow(2), [], asyncio.Event()
    release.set()
    await _hold(window, 100, order, release)
    assert (order, window.in_flight) == ([100], 0)


@pytest.mark.anyio
async def test_a_cancelled_waiter_frees_the_way_for_the_next() -> None:
    window, order = SendWindow(2), []
    held, never = asyncio.Event(), asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(_hold(window, 2, order, held))
        await asyncio.sleep(0)
        stuck = tg.create_task(_hold(window, 2, order, never))
        await asyncio.sleep(0)
        nxt = tg.create_task(_hold(window, 1, order, held))
        await asyncio.sleep(0)
        stuck.cancel()
        held.set()
        await nxt
    assert (order, window.in_flight) == ([2, 1], 0)


def test_the_capacity_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SendWindow(0)


# --- a window whose capacity moves (WindowSizing) ---------------------------------------
Op = tuple[str, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("hold"), st.integers(0, 12)),
        st.tuples(st.just("release"), st.integers(0, 20)),
        st.tuples(st.just("cancel"), st.integers(0, 20)),
        st.tuples(st.just("resize"), st.integers(1, 10)),
    ),
    max_size=40,
)


class _Holder:
    """One ``hold(n)`` in a task of its own: what the window showed when it was granted."""

    def __init__(self, window: SendWindow, n: int, entered: list[_Holder]) -> None:
        self.window, self.n, self.entered = window, n, entered
        self.granted_at: tuple[int, int] | None = None  # (in_flight, capacity)
        self.release = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async with self.window.hold(self.n):
            self.granted_at = (self.window.in_flight, self.window.capacity)
            self.entered.append(self)
            await self.release.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _play(script: list[Op], start: int) -> None:
    window = SendWindow(start)
    entered: list[_Holder] = []
    holders: list[_Holder] = []
    for op, arg in script:
        live = [h for h in holders if not h.task.done()]
        if op == "hold":
            holders.append(_Holder(window, arg, entered))
        elif op == "resize":
            window.resize(arg)
        elif live and op == "release":
            live[arg % len(live)].release.set()
        elif live:
            live[arg % len(live)].task.cancel()
        await _settle()
        waiting = [h for h in holders if h.granted_at is None and not h.task.done()]
        # A waiter is never stranded: while one waits, somebody holds slots to give back.
        assert not waiting or window.in_flight > 0
    for h in holders:
        h.release.set()
    # Every holder ends: a chain of waiters hands the slots on one by one (a stranded
    # waiter would never end, and the timeout says so).
    async with asyncio.timeout(5):
        await asyncio.gather(*(h.task for h in holders), return_exceptions=True)
    assert window.in_flight == 0  # every slot given back
    for h in entered:  # never more in flight than the capacity at grant time
        assert h.granted_at is not None and h.granted_at[0] <= h.granted_at[1]
    served = [h for h in holders if h.granted_at is not None]
    assert entered == served  # in arrival order, cancelled waiters skipped


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(1, 10))
def test_a_resized_window_keeps_its_invariants(script: list[Op], start: int) -> None:
    asyncio.run(_play(script, start))


@pytest.mark.anyio
async def test_a_shrink_below_a_waiters_request_still_serves_it() -> None:
    """A waiter for 8 of 8 slots, the window shrunk to 3 while 2 are held: once they are
    given back it gets the whole (new) window — not a wait for 8 that can never fit."""
    window, order, first, rest = SendWindow(8), [], asyncio.Event(), asyncio.Event()
    rest.set()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(_hold(window, 2, order, first))
        await asyncio.sleep(0)
        tg.create_task(_hold(window, 8, order, rest))
        await asyncio.sleep(0)
        window.resize(3)
        first.set()
    assert (order, window.in_flight, window.peak) == ([2, 8], 0, 3)


def test_the_capacity_follows_the_grant_between_floor_and_maximum() -> None:
    sizing = WindowSizing(maximum=200, minimum=32, queue_s=0.25)
    assert sizing.capacity(None) == 200  # no grant known (nothing refused, or no pacer)
    assert sizing.capacity(1000.0) == 200
    assert sizing.capacity(200.0) == 50  # a level granting 200/s queues ~50
    assert sizing.capacity(5.0) == 32
    with pytest.raises(ValueError, match="minimum"):
        WindowSizing(maximum=10, minimum=11)
