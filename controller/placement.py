"""The leader's placement service: where a batch the facade is about to create should go.

Why in the controller: only the leader's capacity model knows what its in-flight binds and
earlier placements have taken (the assumed ledger); a placement decided anywhere else
would overcommit. The facade posts a batch (one Pod template and the names,
:class:`kube.placement.PlacementRequest`) to ``/internal/v1/placements`` on the leader;
the leader plans the pods with the scheduler, exactly as the binder plans pending pods, and
answers a node per pod (or none: create it unbound). The facade then creates the pods with
``spec.nodeName`` set — one API write per sandbox instead of a create and a bind.

The ledger holds a placed pod under ``namespace/name`` (it has no uid yet) until the
bound-pod watch shows the pod (the reservation is then replaced by the pod itself) or the
scheduler's ``bind_timeout_s`` passes: a pod the facade created unbound after all just
holds its capacity twice for a while, never too little.

**Leader changes.** A new leader does not know which placements its predecessor handed
out. It serves placements — and the controller binds — only once ``valid_for_s +
handover_margin_s`` have passed since the old leader stopped answering
(:meth:`wait_out_predecessor`): every create a placement allowed was sent within
``valid_for_s`` of being asked for, so by then it is stored and in this leader's watch.
When the old leader's Lease ran out, the election bounds how long ago it stopped
(controller/leader.py): with the default 3 s lease and 2 s renew deadline, at least 1 s
before the takeover, so the wait is 0.5 s; after a release, or with no record, the whole
1.5 s. Until then calls get 503 ``not_serving`` and the
facade creates unbound pods, which the binder places once the wait is over.

**Callers are authenticated** (controller/placement_auth.py): the facade's bearer token,
reviewed by the API server (TokenReview, cached), must be the facade's ServiceAccount's;
401 ``unauthenticated`` / 403 ``caller_not_allowed`` otherwise, before anything else is
answered. Off (``--no-placement-auth``) only where nothing else can reach the port.

Bad input gets a 400 with a machine-readable ``reason``, never a 500.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from controller.placement_auth import CallerVerifier
from controller.view import ClusterView
from kube.cache import Obj
from kube.informer import Handlers
from kube.placement import PLACEMENT_PATH, PlacementAnswer, PlacementRequest
from sandman.base.settings import setting

__all__ = ["PlacementService", "PlacementSettings"]

log = logging.getLogger(__name__)

#: A request places at most this many pods (the facade's largest batch is 1,000).
MAX_NAMES = 5_000


@dataclass(frozen=True, slots=True)
class PlacementSettings:
    valid_for_s: float = setting(
        1.0,
        help="how long after asking the facade may still send a create with the node it was "
        "given (a new leader waits it out)",
    )
    handover_margin_s: float = setting(
        0.5,
        help="added to valid_for_s before a new leader places anything: the API server's "
        "answer and the watch event of a create sent at the last moment",
    )

    def __post_init__(self) -> None:
        if self.valid_for_s <= 0 or self.handover_margin_s < 0:
            raise ValueError("valid_for_s must be > 0 and handover_margin_s >= 0")

    @property
    def handover_s(self) -> float:
        return self.valid_for_s + self.handover_margin_s


class PlacementService:
    """:meth:`attach` once (standbys too), :meth:`routes` on the controller's HTTP server;
    :meth:`serve` while leading."""

    def __init__(
        self,
        view: ClusterView,
        settings: PlacementSettings | None = None,
        *,
        verifier: CallerVerifier | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.view = view
        self.verifier = verifier
        self.scheduler = view.scheduler
        self.settings = settings or PlacementSettings()
        self._clock = clock
        self._decoder = msgspec.json.Decoder(PlacementRequest)
        self._encoder = msgspec.json.Encoder()
        self.serving = False
        #: Outcomes, for metrics and tests.
        self.counts = {"placed": 0, "unplaced": 0, "refused": 0, "unauthorized": 0}

    def attach(self) -> None:
        self.view.bound.add_handler(Handlers(add=self._pod_seen))

    def _pod_seen(self, pod: Obj) -> None:
        """A placed pod is in the watch: the view counted it, drop its reservation."""
        meta = pod["metadata"]
        self.scheduler.forget(f"{meta.get('namespace', '')}/{meta.get('name', '')}")

    def routes(self) -> list[web.RouteDef]:
        return [web.post(PLACEMENT_PATH, self._handle), web.get(PLACEMENT_PATH, self._status)]

    async def _status(self, _request: web.Request) -> web.Response:
        """200 while placements are served (the leader, its predecessor waited out)."""
        if self.serving:
            return web.json_response({"serving": True})
        return _error(503, "not_serving", "not the leader, or waiting out the last one's")

    async def wait_out_predecessor(self, quiet_s: float = 0.0) -> None:
        """Just became leader: let every placement an earlier leader gave run out.

        ``quiet_s``: how long ago that leader must have stopped answering at the latest
        (controller/leader.py, ``predecessor_quiet_s``); its placements were good for
        ``valid_for_s`` after they were asked for, so only the rest of the hand-over is
        waited."""
        await asyncio.sleep(max(0.0, self.settings.handover_s - quiet_s))

    async def serve(self) -> None:
        """Serve placements until cancelled (leadership lost)."""
        await self.view.wait_synced()
        self.serving = True
        try:
            await asyncio.Event().wait()
        finally:
            self.serving = False

    # --- the endpoint -------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        refused = await refusal(request, self.verifier, self.serving, self.counts)
        if refused is not None:
            return refused
        try:
            body = self._decoder.decode(await request.read())
        except msgspec.DecodeError as e:
            return _error(400, "invalid_request", str(e))
        if not body.names or len(body.names) > MAX_NAMES or len(set(body.names)) != len(body.names):
            return _error(400, "invalid_names", f"1 to {MAX_NAMES} distinct pod names")
        try:
            nodes = self.place(body)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            return _error(400, "invalid_template", f"the pod template cannot be planned: {e}")
        answer = PlacementAnswer(nodes=nodes, valid_for_s=self.settings.valid_for_s)
        return web.Response(body=self._encoder.encode(answer), content_type="application/json")

    def place(self, request: PlacementRequest) -> list[str | None]:
        """Plan ``request``'s pods and reserve their capacity (synchronous, no I/O).

        A pod asked for again while its reservation holds (the facade's create missed its
        placement's life, facade/preplaced.py) gets the same node: the capacity is taken
        once, and the answer is the same whichever of the two creates lands."""
        ns = request.namespace
        where: dict[str, str | None] = {}
        fresh = []
        for name in request.names:
            uid = f"{ns}/{name}"
            held = self.scheduler.reserved_on(uid)
            if held is not None:
                where[uid] = held
            else:
                fresh.append(_pod(request.template, ns, name))
        if fresh:
            plan = self.scheduler.plan(fresh, self._clock())
            where.update((a.uid, a.node) for a in plan.assignments)
        nodes = [where.get(f"{ns}/{name}") for name in request.names]
        placed = sum(1 for n in nodes if n)
        self.counts["placed"] += placed
        self.counts["unplaced"] += len(nodes) - placed
        return nodes


def _pod(template: dict[str, Any], namespace: str, name: str) -> Obj:
    meta = dict(template.get("metadata") or {})
    meta.pop("uid", None)  # keyed namespace/name until the watch shows the real pod
    meta.update(namespace=namespace, name=name)
    spec = dict(template.get("spec") or {})
    spec.pop("nodeName", None)
    return {**template, "metadata": meta, "spec": spec}


def _error(status: int, reason: str, message: str) -> web.Response:
    return web.json_response({"reason": reason, "message": message}, status=status)


async def refusal(
    request: web.Request, verifier: CallerVerifier | None, serving: bool, counts: dict[str, int]
) -> web.Response | None:
    """What the leader's internal endpoints (placements, claims) check before reading a
    body: the caller (``placement_auth.py``, counted ``unauthorized``), then that this
    replica serves (counted ``refused``); None when both hold."""
    if verifier is not None:
        refused = await verifier.check(request.headers.get("Authorization"))
        if refused is not None:
            counts["unauthorized"] += 1
            return _error(refused.status, refused.reason, refused.message)
    if not serving:
        counts["refused"] += 1
        return _error(503, "not_serving", "not the leader, or waiting out the last one's")
    return None
