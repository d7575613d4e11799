"""``async with`` over what the devstack starts (devstack/lifecycle.py ``StartStop``, the base
of ``Stack`` and ``ContainerdHost``): a start that fails half-way stops what it had started
before the error goes on, and the block's end stops it. The started thing here is a real
child process, as in both users."""

from __future__ import annotations

import asyncio

import pytest

from devstack.containerd import ContainerdHost
from devstack.lifecycle import StartStop
from devstack.stack import Stack

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class Sleeper(StartStop):
    """Starts a child process, then fails if told to."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.proc: asyncio.subprocess.Process | None = None
        self.stops = 0

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec("sleep", "60")
        if self.fail:
            raise RuntimeError("the second part did not come up")

    async def stop(self) -> None:
        self.stops += 1
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def test_a_start_that_fails_half_way_stops_what_it_started() -> None:
    sleeper = Sleeper(fail=True)
    with pytest.raises(RuntimeError, match="did not come up"):
        async with sleeper:
            pytest.fail("the block must not run")
    assert sleeper.proc is not None and sleeper.proc.returncode is not None
    assert sleeper.stops == 1


async def test_the_end_of_the_block_stops_it() -> None:
    async with Sleeper(fail=False) as sleeper:
        assert sleeper.proc is not None and sleeper.proc.returncode is None
    assert sleeper.proc.returncode is not None
    assert sleeper.stops == 1


async def test_the_stack_and_the_containerd_host_start_and_stop_by_it() -> None:
    assert issubclass(Stack, StartStop)
    assert issubclass(ContainerdHost, StartStop)
