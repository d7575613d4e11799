"""The pre-placed source: ask the leading controller where an order's pods go, send each
create on its node while its placement is good, ask once more for the ones that ran out, and
leave the rest to the next source (unbound: facade/unbound.py).

Why: in binder mode every sandbox costs two API writes (the create and the binding); a pod
created with ``spec.nodeName`` from the leader's placement costs one (kube/placement.py).
Whatever goes wrong on this path — no leader, no room, a placement that ran out twice — is
left, never failed: no trainer request fails because the fast path did. Groups are left
whole: the binder places a group all or nothing (scheduler/gang.py).

**Tokens before the ask, and the send window around it.** A placement is good for about a
second (its ``send_by``); the creates must go out within it, so the order's turn at the
client's token bucket is taken *before* the ask (the creates are then ``prepaid``), and the
ask waits for room in a send window (facade/window.py) whose capacity follows the grant the
client's pacer has seen (:class:`~facade.window.WindowSizing`): no more creates unanswered
than the server's queue holds. An order larger than the capacity is asked for and sent in
parts of at most that many (docs/benchmarks/burst.md, window17); the window is held around
each part's asks and sends, and released before what is left goes on.

**The second ask.** A placement runs out when its create could not be *sent* within the
leader's ``valid_for_s`` (a slow first create, a loaded machine): the 371 of 11,858 creates
that ran out in one reference burst (docs/benchmarks/burst.md, issue 16) each cost a bind.
Asking again costs one internal call for all of a part's late members and no API write; the
leader answers a pod it still holds a reservation for with the same node, so the capacity is
taken once. A member late twice is left (``late``: counted ``unbound-late``, its token spent);
one the leader has no node for is left with its token taken (``prepaid``).
"""

from __future__ import annotations

from kube import KubeClient
from kube.cache import Obj
from kube.placement import PlacementClient

from .order import Member, Order, Outcome, concurrently
from .sources import Supply
from .tenancy import Tenant
from .window import SendWindow, WindowSizing
from .writer import PodWriter

__all__ = ["PrePlacedSource"]

#: A part's members are asked for once, and the late once more.
ASKS = 2


class PrePlacedSource:
    """Members on the nodes the leader placed them on (module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        placer: PlacementClient,
        sizing: WindowSizing,
        writer: PodWriter,
    ) -> None:
        self.client = client
        self.placer = placer
        self.sizing = sizing
        self.writer = writer
        self.window = SendWindow(sizing.capacity(None))

    def capacity(self) -> int:
        """The send window's capacity, sized for the grant seen now."""
        self.window.resize(self.sizing.capacity(self.client.pacer.grant()))
        return self.window.capacity

    async def supply(self, order: Order) -> Supply:
        if order.group is not None:
            return Supply(left=order.members)  # groups always go to the binder
        members, size = order.members, self.capacity()
        template = _template(members[0].pod)  # one spec: the same for every member
        parts = await concurrently(
            [
                self._supply_part(order.tenant, members[i : i + size], template)
                for i in range(0, len(members), size)
            ]
        )
        outcomes: dict[int, Outcome] = {}
        left: list[Member] = []
        for part in parts:
            outcomes.update(part.outcomes)
            left += part.left
        return Supply(outcomes, tuple(left))

    async def _supply_part(
        self, tenant: Tenant, members: tuple[Member, ...], template: Obj
    ) -> Supply:
        """One part within the send window: its tokens, the leader's placements, the
        creates; the same once more for the late."""
        outcomes: dict[int, Outcome] = {}
        left: list[Member] = []
        async with self.window.hold(len(members)):  # its capacity was sized by supply()
            for _ in range(ASKS):
                names = [m.name for m in members]
                await self.client.take_tokens(len(names))  # a placement lasts about a second
                placements = await self.placer.place(tenant.namespace, names, template)
                left += [
                    Member(m.index, m.pod, prepaid=True)
                    for m in members
                    if m.name not in placements
                ]
                placed = [m for m in members if m.name in placements]
                if not placed:  # the leader placed none of them: nothing to send, none late
                    members = ()
                    break
                written, members = await self.writer.on_nodes(tenant, placed, placements)
                outcomes.update(written)
                if not members:
                    break
        return Supply(outcomes, (*left, *members))  # what the leader did not place, or late twice


def _template(pod: Obj) -> Obj:
    """What the leader needs to plan an order of ``pod``'s spec: no names, no env (it
    holds the sandbox's daemon token)."""

    def bare(containers: list[Obj]) -> list[Obj]:
        return [{k: v for k, v in c.items() if k != "env"} for c in containers]

    meta, spec = pod["metadata"], dict(pod["spec"])
    for key in ("containers", "initContainers"):
        if key in spec:
            spec[key] = bare(spec[key])
    return {
        "metadata": {"labels": meta.get("labels"), "annotations": meta.get("annotations")},
        "spec": spec,
    }
