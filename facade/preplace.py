"""Pre-placed creation on the facade's side: ask the leader where a batch goes, send each
create while its placement is good, ask once more for the ones that ran out, and create
unbound whatever is left.

Why a second ask and not straight to unbound: an unbound pod costs the binder's write, and
the point of pre-placed creation is one write per sandbox. A placement runs out when its
create could not be *sent* within the leader's ``valid_for_s`` (a slow first create of the
batch, a loaded machine): the 371 of 11,858 creates that ran out in one reference burst
(docs/benchmarks/burst.md, issue 16) each cost a bind. Asking again costs one internal call
for all of a batch's late members (or for a single create) and no API write; the leader
answers a pod it still holds a reservation for with the same node, so the capacity is taken
once, and a create that is late twice goes unbound as before.

The send window (facade/window.py) is held around the asks and the sends, and a batch's
tokens are taken before each ask: what is asked for can go out at once. Before each hold
the window's capacity is set from the grant the client's pacer has seen
(:class:`~facade.window.WindowSizing`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

from kube import PODS, KubeClient, SendDeadlinePassed
from kube.cache import Obj
from kube.placement import Placement, PlacementClient

from .metrics import FacadeMetrics
from .window import SendWindow, WindowSizing

__all__ = ["PlacementRanOut", "PrePlacement"]


class PlacementRanOut(Exception):
    """Not sent: the pod's placement ran out first (ask again with :meth:`PrePlacement.place`,
    or create it unbound)."""


class PrePlacement:
    """The fast path: :meth:`sending` around :meth:`place` and the :meth:`post` of its pods."""

    def __init__(
        self,
        client: KubeClient,
        placer: PlacementClient,
        sizing: WindowSizing,
        metrics: FacadeMetrics,
        template: Callable[[Obj], Obj],
    ) -> None:
        self.client = client
        self.placer = placer
        self.sizing = sizing
        self.window = SendWindow(sizing.capacity(None))
        self.metrics = metrics
        self._template = template

    def capacity(self) -> int:
        """The send window's capacity, sized for the grant seen now: a batch
        larger than it is asked for and sent in parts of at most this many."""
        self.window.resize(self.sizing.capacity(self.client.pacer.grant()))
        return self.window.capacity

    def sending(self, n: int) -> contextlib.AbstractAsyncContextManager[None]:
        """``n`` slots of the send window around asking for placements and sending."""
        self.capacity()
        return self.window.hold(n)

    async def place(self, namespace: str, pods: Mapping[int, Obj]) -> dict[str, Placement]:
        """The leader's placements for ``pods`` (by pod name); {} means all unbound. Our turn
        at the API budget comes first: a placement is good for about a second."""
        if not pods:
            return {}
        names = [p["metadata"]["name"] for p in pods.values()]
        await self.client.take_tokens(len(names))
        first = next(iter(pods.values()))
        return await self.placer.place(namespace, names, self._template(first))

    async def post(self, ns: str, pod: Obj, placement: Placement | None, *, last: bool) -> Obj:
        """Create ``pod`` on its placement's node, its token already taken (:meth:`place`).

        A placement that ran out before the create could be sent raises
        :class:`PlacementRanOut`, or — ``last`` — creates the pod unbound instead, with a
        token of its own. ``placement`` None: unbound (the leader had no node for it)."""
        if placement is None:
            return await self._post_unbound(ns, pod, prepaid=True, label="unbound")
        placed = {**pod, "spec": {**pod["spec"], "nodeName": placement.node}}
        try:
            created: Obj = await self.client.request(
                "POST",
                PODS.path(ns),
                body=placed,
                idempotent=True,
                send_by=placement.send_by,
                prepaid=True,
                lean=True,  # checks send_by with the connection in hand (kube/lean.py)
            )
        except SendDeadlinePassed as e:
            self.metrics.placements_ran_out.inc()
            if not last:
                raise PlacementRanOut(pod["metadata"]["name"]) from e
            return await self._post_unbound(ns, pod, prepaid=False, label="unbound-late")
        self.metrics.creates.labels("pre-placed").inc()
        return created

    async def _post_unbound(self, ns: str, pod: Obj, *, prepaid: bool, label: str) -> Obj:
        created: Obj = await self.client.request(
            "POST", PODS.path(ns), body=pod, idempotent=True, prepaid=prepaid, lean=True
        )
        self.metrics.creates.labels(label).inc()
        return created
