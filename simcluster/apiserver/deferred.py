"""Run a follow-up of a write after the write's request has been answered.

Some effects of a write come after it on a real cluster: the garbage collector deletes an
owner's dependents, the namespace controller empties a terminating namespace. Doing them in
the request that caused them would put their events in the wrong order (a dependent's
DELETED before the owner's) and make one request do unbounded work. So they run on the event
loop's next turn; with no loop running (an ``ApiCore`` driven synchronously, as unit tests
and start-up do) they run at once, so nothing is left pending without a loop to run it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["call_soon"]


def call_soon(fn: Callable[[], object]) -> None:
    """``fn()`` on the running loop's next turn, or now when no loop is running."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        fn()
        return
    loop.call_soon(fn)
