"""Pre-placed creation's contract: the leader's placement endpoint, how it is found, and
the facade's client for it.

Why: in binder mode every sandbox costs two API writes before it can start (the create and
the ``pods/binding``). When the facade asks the leading controller *where* a batch goes
before creating it, it can create the pods with ``spec.nodeName`` already set: one write.
The leader plans them exactly as it plans a batch of pending pods and keeps the capacity in
its assumed ledger until its bound-pod watch shows the pod (or the reservation expires).

How the facade finds the leader: the leader writes the URL of its placement endpoint on its
election Lease (annotation :data:`ANNOTATION_PLACEMENT_URL`, next to ``holderIdentity``),
and the facade reads that Lease (a cached GET, refreshed at most every
``leader_refresh_s`` and at once after a failed call). No Service or DNS name per leader
is needed, and a standby never receives placement calls. A controller that runs without
election (one replica) is given to the facade as a fixed URL instead.

**Never worse than binder mode.** Any failure of the fast path — no leader, the leader
unreachable within ``timeout_s``, a 503 while a new leader waits out its predecessor's
placements, no room — leaves the pod to be created unbound, as before.

**A failover is waited out, briefly.** A leader change takes 3.5-4 s (controller/leader.py:
a 3 s lease, then the new leader's quiet time before it serves); creating every pod asked
about meanwhile unbound cost ~4,000 binds in a reference burst (1.35 writes per sandbox,
docs/benchmarks/burst.md). So an ask that finds no leader (none on the Lease, the call
failing, 503) is repeated every ``leader_retry_s`` until ``leader_wait_s`` after the
leader was first missed, and only then are the pods given up to the binder (the Lease is
read again at most once per ``leader_retry_s`` meanwhile). The bound counts from the
first miss, not per ask: once a leader has been missing for longer (a controller down for
good), every ask falls back at once, as before, until a leader answers again. Only a
leader that answered before is waited for: a facade that never found one (the controller
not deployed yet, or not at all) creates unbound at once, as before — there is no
failover to wait out.

**The facade proves who it is.** Each call carries a bearer token: the API credentials'
(its ServiceAccount's), or ``token_file``'s, a projected token for the placement
endpoint's audience (the production overlay's); the leader reviews it with the API server
and answers only the facade's identity (controller/placement_auth.py). A refused call
(401/403) is a failed call like any other: the pods go unbound, and the facade logs why.

**Never overcommit.** A placement is good for ``valid_for_s`` (the leader's answer): the
facade must *send* the create within that time after it asked (:meth:`KubeClient.request`'s
``send_by``), or ask again (the leader answers a pod it still holds a reservation for with
the same node) or leave the pod to be created unbound (facade/preplaced.py). A new leader serves
placements (and binds) only after ``valid_for_s`` plus a margin have passed since its
predecessor stopped answering: by then every create an old leader's placement allowed has
been sent and, the API server answering in milliseconds, is in the new leader's watch
(docs/controller.md, "Pre-placed creation").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from kube.errors import KubeError, NotFound
from kube.pool_contract import CLAIMS_PATH, ClaimsAnswer, ClaimsRequest
from kube.resources import LEASES
from kube.verbs import Verbs
from sandman.base.settings import setting

__all__ = [
    "ANNOTATION_PLACEMENT_URL",
    "OUTCOMES",
    "PLACEMENT_PATH",
    "WAIT_OUTCOMES",
    "ClaimReused",
    "Placement",
    "PlacementAnswer",
    "PlacementClient",
    "PlacementClientSettings",
    "PlacementRequest",
]

log = logging.getLogger(__name__)

#: On the controller's election Lease: where the leader serves placements.
ANNOTATION_PLACEMENT_URL = "sandman.io/placement-url"
PLACEMENT_PATH = "/internal/v1/placements"
#: What became of the pods of a placement call: placed on a node; answered without one
#: (the leader had no room); the call failed (unreachable, 503 while a new leader waits,
#: timeout); no leader to ask (no holder, or it publishes no URL).
OUTCOMES = ("placed", "no_room", "call_failed", "no_leader")
#: How an ask that waited for a leader ended: a leader answered, or the wait ran out (the
#: pods go unbound).
WAIT_OUTCOMES = ("answered", "gave_up")


class PlacementRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Pods to place, all of one shape: ``template`` is one rendered Pod (its requests,
    selectors, tolerations, image and group annotations count; its name does not), and
    ``names`` the pods' names in ``namespace``."""

    namespace: str
    names: list[str]
    template: dict[str, Any]


class PlacementAnswer(msgspec.Struct):
    """``nodes[i]``: where ``names[i]`` goes (None: create it unbound); the placements are
    good for ``valid_for_s`` after the request was sent."""

    nodes: list[str | None]
    valid_for_s: float


class ClaimReused(Exception):
    """The leader answered 409: the claim's name (the Idempotency-Key's) was used for
    another request."""


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    #: ``time.monotonic()`` after which the create must not be sent with this node.
    send_by: float


@dataclass(frozen=True, slots=True)
class PlacementClientSettings:
    url: str = setting(
        "",
        help="the leader's placement URL when there is no election (one controller that always "
        'leads, e.g. the local stack); "": read it from the election Lease',
    )
    lease_name: str = setting(
        "sandman-controller",
        help="the controller's election Lease (controller.leader.ElectionSettings' defaults)",
    )
    lease_namespace: str = setting("sandman-system", help="the election Lease's namespace")
    timeout_s: float = setting(
        0.5, help="a placement call that takes longer is abandoned: the pods go unbound"
    )
    leader_refresh_s: float = setting(
        1.0, help="the Lease is re-read at most this often (and after a failed call)"
    )
    max_valid_for_s: float = setting(
        2.0, help="the facade's own cap on a placement's life, whatever the leader says"
    )
    leader_wait_s: float = setting(
        4.0,
        help="how long after the leader was first missed an ask is repeated before its pods go "
        "unbound: a failover (the controller's 3 s lease, its 0.5 s hand-over quiet time and a "
        "renewal's retry) fits; keep it above the controller's lease duration plus 1 s; 0: fall "
        "back at once",
    )
    leader_retry_s: float = setting(0.25, help="between the asks of that wait")
    token_file: str = setting(
        "",
        help="the bearer token presented to the placement endpoint, read at each call (a "
        'projected ServiceAccount token the kubelet rotates); "": the API credentials\' token',
    )

    def __post_init__(self) -> None:
        if min(self.timeout_s, self.leader_refresh_s, self.max_valid_for_s) <= 0:
            raise ValueError("timeout_s, leader_refresh_s and max_valid_for_s must be > 0")
        if self.leader_wait_s < 0 or self.leader_retry_s <= 0:
            raise ValueError("leader_wait_s must be >= 0 and leader_retry_s > 0")


class PlacementClient:
    """The facade's side: ``await place(namespace, names, template)``."""

    def __init__(
        self,
        api: Verbs,
        settings: PlacementClientSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        record: Callable[[str, int], None] | None = None,
        record_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.api = api
        self.settings = settings or PlacementClientSettings()
        self._clock = clock
        self._url = ""
        self._read_at = -float("inf")
        self._reading: asyncio.Task[str] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(PlacementAnswer)
        self._claims_decoder = msgspec.json.Decoder(ClaimsAnswer)
        #: ``record(outcome, pods)`` after every call, outcome one of :data:`OUTCOMES`.
        self._record = record or (lambda _outcome, _n: None)
        #: ``record_wait(outcome)`` after every ask that waited, one of :data:`WAIT_OUTCOMES`.
        self._record_wait = record_wait or (lambda _outcome: None)
        #: When the leader was first missed (None: the last ask was answered), and whether
        #: a leader ever answered: only a leader that was there is waited for.
        self._missed_since: float | None = None
        self._led = False

    async def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, KubeError):
                await self._reading
            self._reading = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def place(
        self, namespace: str, names: Sequence[str], template: dict[str, Any]
    ) -> dict[str, Placement]:
        """Placements for as many of ``names`` as the leader could place; {} on any failure
        — after waiting for a missing leader (module docstring)."""
        if not names:
            return {}
        s, request = self.settings, PlacementRequest(namespace, list(names), template)
        waited = False
        while True:
            sent_at = self._clock()
            answer, failure = await self._ask(request)
            if answer is not None:
                self._missed_since, self._led = None, True
                if waited:
                    self._record_wait("answered")
                return self._placed(names, answer, sent_at)
            now = self._clock()
            if self._missed_since is None:
                self._missed_since = now
            if not self._led or now + s.leader_retry_s > self._missed_since + s.leader_wait_s:
                if waited:
                    self._record_wait("gave_up")
                log.info("placement failed (%s): %d pods go unbound", failure, len(names))
                return self._failed(len(names), failure)
            waited = True
            self._reread_lease()  # a new leader may be on it by the next ask
            await asyncio.sleep(s.leader_retry_s)

    async def claim(self, request: ClaimsRequest, timeout_s: float) -> ClaimsAnswer | None:
        """The leader's claims endpoint (controller/claims.py), asked once within
        ``timeout_s``: its answer, or None when there is no leader, the call fails or takes
        longer (the caller creates the sandboxes cold; no failover is waited out, a claim is
        only ever a shortcut). Raises :class:`ClaimReused` for a 409."""
        try:
            async with asyncio.timeout(timeout_s):
                url = await self._leader_url()
                if not url:
                    return None
                status, body = await self._post(url + CLAIMS_PATH, self._encoder.encode(request))
        except (TimeoutError, aiohttp.ClientError, KubeError, OSError) as e:
            log.debug("claims call failed: %s", type(e).__name__)
            self._reread_lease()
            return None
        if status == 409:
            raise ClaimReused(body[:200].decode(errors="replace"))
        if status != 200:
            log.info("claims call answered %d: %s", status, body[:200].decode(errors="replace"))
            self._reread_lease()
            return None
        try:
            return self._claims_decoder.decode(body)
        except msgspec.DecodeError:
            return None

    async def _post(self, url: str, data: bytes) -> tuple[int, bytes]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        async with self._session.post(
            url, data=data, headers={"Content-Type": "application/json", **self._credentials()}
        ) as resp:
            return resp.status, await resp.read()

    async def _ask(self, request: PlacementRequest) -> tuple[PlacementAnswer | None, str]:
        """The leader's answer, or None and the outcome of the failure."""
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                url = await self._leader_url()
                if not url:
                    return None, "no_leader"
                return await self._call(url, request), ""
        except (TimeoutError, aiohttp.ClientError, KubeError, msgspec.DecodeError, OSError) as e:
            log.debug("placement call failed: %s", type(e).__name__)
            self._reread_lease()  # the leader may have changed
            return None, "call_failed"

    def _placed(
        self, names: Sequence[str], answer: PlacementAnswer, sent_at: float
    ) -> dict[str, Placement]:
        valid = min(answer.valid_for_s, self.settings.max_valid_for_s)
        out = {
            name: Placement(node, sent_at + valid)
            for name, node in zip(names, answer.nodes, strict=False)
            if node
        }
        self._record("placed", len(out))
        self._record("no_room", len(names) - len(out))
        return out

    def _failed(self, n: int, outcome: str) -> dict[str, Placement]:
        self._record(outcome, n)
        return {}

    async def _call(self, url: str, request: PlacementRequest) -> PlacementAnswer:
        status, body = await self._post(url + PLACEMENT_PATH, self._encoder.encode(request))
        if status != 200:
            raise aiohttp.ClientError(f"{status}: {body[:200].decode(errors='replace')}")
        return self._decoder.decode(body)

    def _credentials(self) -> dict[str, str]:
        """Who the facade is, to the controller (controller/placement_auth.py)."""
        if not self.settings.token_file:
            return self.api.bearer_headers()
        token = Path(self.settings.token_file).read_text().strip()  # OSError: a failed call
        return {"Authorization": f"Bearer {token}"}

    def _reread_lease(self) -> None:
        """The next ask reads the Lease again — but at most once per ``leader_retry_s`` over
        all asks: during a failover every waiting batch's ask fails each ``leader_retry_s``,
        and a read forced by each (one read in flight, shared) read the Lease about twice
        per retry (tests/facade/test_leader_wait.py)."""
        s = self.settings
        self._read_at = min(self._read_at, self._clock() - s.leader_refresh_s + s.leader_retry_s)

    async def _leader_url(self) -> str:
        if self.settings.url:
            return self.settings.url
        if self._clock() - self._read_at < self.settings.leader_refresh_s:
            return self._url
        if self._reading is None or self._reading.done():
            self._reading = asyncio.create_task(self._read_lease())
        return await asyncio.shield(self._reading)

    async def _read_lease(self) -> str:
        s = self.settings
        try:
            lease = await self.api.get(LEASES, s.lease_name, s.lease_namespace)
        except NotFound:
            lease = {}
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        holder = (lease.get("spec") or {}).get("holderIdentity")
        self._url = str(annotations.get(ANNOTATION_PLACEMENT_URL) or "") if holder else ""
        self._read_at = self._clock()
        return self._url
