"""The unbound source: pods created with ``schedulerName: sandman`` for the binder to place
(controller/binder.py) — the fallback, and the last source: it takes every member it is
handed, whatever the sources before it left.

What comes here: every create in binder mode (``--creation binder``), every group (placed
all or nothing by the binder), and whatever the pre-placed source left (no leader, no room,
a placement that ran out twice). Such a member is written as it was left: with its token
already taken (``prepaid``) when a source asked for it, counted ``unbound-late`` when its
placement ran out.

Why two bounds: the send window (facade/window.py, ``unbound_in_flight``) keeps the unbound
creates of all orders unanswered at once to about what the API server's queue holds (500/s x
0.25 s in the reference profile; a create + bind burst drew 6-10% 429s with 256 in flight),
and ``batch_concurrency`` keeps one large order from taking every connection at once.
"""

from __future__ import annotations

from .order import Order
from .sources import Supply
from .window import SendWindow
from .writer import PodWriter

__all__ = ["UnboundSource"]


class UnboundSource:
    """Every member handed to it, unbound: at most ``concurrency`` of an order at once and
    ``in_flight`` over all orders."""

    def __init__(self, writer: PodWriter, in_flight: int, concurrency: int) -> None:
        self.writer = writer
        self.window = SendWindow(in_flight)
        self.concurrency = concurrency

    async def supply(self, order: Order) -> Supply:
        async with self.window.hold(len(order.members)):
            return Supply(await self.writer.unbound(order.tenant, order.members, self.concurrency))
