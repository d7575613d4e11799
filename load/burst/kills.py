"""The burst's process kills: the leading controller and a facade replica, SIGKILLed mid-burst.

Why kills timed on the burst's own progress, not on the clock: the question is what the
requests in flight at that moment get (issue 23: "0 handed twice, 0 lost, every request
answered"), and a fixed time lands before, during or after the burst depending on the
machine's load. So each kill waits for a count of the run: the leader's for a fraction of
the sandboxes bound in a cold burst (``--kill-leader-at``: what placement and binding must
survive), or of the sandboxes answered in an announced one (the claims are answered, not
bound: what the claims endpoint must survive); a facade replica's for a fraction of the
requests answered (``--kill-facade-at``). The answered counts are the driver's, checked as
each request is answered (load/burst/driver.py ``on_answer``), so a kill in a one-second
burst is not late by a polling interval.

The facade replica killed is the one with the most requests in flight at that moment
(ties: the last replica), so the kill interrupts requests whenever any are in flight;
``SIGKILL`` leaves it no clean shutdown, as a crashed pod or a lost node would.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable

from devstack.stack import Stack
from load.burst.driver import FacadeDriver

__all__ = ["FacadeKiller", "LeaderKiller"]

Say = Callable[[str], None]


class _Kill(abc.ABC):
    """SIGKILL one stack process once a count reaches ``at`` (never: ``at`` None)."""

    what = "process"
    unit = ""

    def __init__(self, stack: Stack, fraction: float | None, total: int, say: Say) -> None:
        self.stack, self.say = stack, say
        self.at = None if fraction is None else max(1, math.ceil(fraction * total))
        self.killed_at: float | None = None
        self.killed = ""  # the process's name once killed

    def due(self, count: int) -> bool:
        return self.at is not None and self.killed_at is None and count >= self.at

    async def check(self, count: int, now: float) -> None:
        if not self.due(count):
            return
        self.killed_at = now  # before the awaits: a second answer must not kill again
        name = self.victim()
        await self.stack.kill(name)
        self.killed = name
        self.say(
            f"SIGKILLed the {self.what} ({name}{self.detail()}) at {count:,} {self.unit}, "
            f"t = {now:.2f} s"
        )

    @abc.abstractmethod
    def victim(self) -> str:
        """The stack process to kill now."""

    def detail(self) -> str:
        return ""


class LeaderKiller(_Kill):
    """The leading controller (of two, a warm standby), found before the burst so the kill
    itself is not late."""

    what = "leader"

    def __init__(
        self, stack: Stack, fraction: float | None, total: int, say: Say, unit: str
    ) -> None:
        super().__init__(stack, fraction, total, say)
        self.unit = unit
        self.leader = ""

    async def find_leader(self) -> None:
        if self.at is not None:
            self.leader = await self.stack.leader()
            if not self.leader:
                raise RuntimeError("no controller holds the leader Lease")

    def victim(self) -> str:
        return self.leader


class FacadeKiller(_Kill):
    """A facade replica (of two or more): the one with the most requests in flight."""

    what = "facade replica"
    unit = "requests answered"

    def __init__(
        self, stack: Stack, fraction: float | None, total: int, say: Say, driver: FacadeDriver
    ) -> None:
        super().__init__(stack, fraction, total, say)
        self.driver = driver
        self.in_flight = 0  # requests in flight on it when it was killed

    def victim(self) -> str:
        urls = self.stack.urls
        busiest = max(reversed(urls), key=lambda u: self.driver.in_flight.get(u, 0))
        self.in_flight = self.driver.in_flight.get(busiest, 0)
        return self.stack.facades()[urls.index(busiest)]

    def detail(self) -> str:
        return f", {self.in_flight} request{'s' * (self.in_flight != 1)} in flight on it"
