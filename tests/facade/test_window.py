"""The send window (facade/window.py): at most ``capacity`` slots held, waiters served in
arrival order (a large batch is not overtaken by small ones), a request above the capacity
takes the whole window, and a cancelled waiter gives back what it held or waited for."""

from __future__ import annotations

import asyncio

import pytest

from facade.window import SendWindow
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
