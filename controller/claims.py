"""The leader's claims endpoint: Ready pool pods handed to a create, one API write per batch.

Why in the controller, beside the placements: the facade runs as many replicas, and a pool
pod must be handed to at most one request. The leading controller already serves the
placements with an exact view of the cluster; serving claims there too puts the one
decision in one process (the book, controller/claim_book.py), behind the same election and
hand-over rules. The facade posts :class:`kube.pool_contract.ClaimsRequest` to
``/internal/v1/claims``; the leader picks Ready unclaimed pool pods of that (namespace,
image, class), writes ONE ``SandboxClaim`` naming them (its name from the facade's
Idempotency-Key), and answers the pod names. Fewer pods than asked — or none, with no
write — is a normal answer: the facade creates the rest cold.

**Retries** (Idempotency-Key): a claim the book knows (the watch, or this leader's own
write) is answered from it; a create answered AlreadyExists (a claim the book had not seen)
is read back. Either way the request's digest must match the stored one (409
``idempotency_key_reused`` otherwise), and the pods are the first request's.

**Leader changes.** A claim write is sent within ``send_within_s`` of the decision or not at
all (``send_by``), and ``send_within_s`` is at most the placements' ``valid_for_s``: the
hand-over wait a new leader makes before serving placements (controller/placement.py)
covers the claims its predecessor wrote too. Then the new leader reads every SandboxClaim
once with a fresh list (not only its watch) before serving, so every pod a predecessor
handed out is claimed in its book. A write whose outcome is unknown (a timeout, a 5xx)
keeps its pods held — never offered again by this leader; the next leader reads whether it
landed. As a last line, a pool daemon takes one claim only (daemon/sandbox/claim.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram

from controller.claim_book import ClaimBook
from controller.placement import refusal
from controller.placement_auth import CallerVerifier
from controller.view import ClusterView
from kube import KubeClient
from kube.cache import Obj
from kube.contract import LABEL_OWNER
from kube.errors import AlreadyExists, KubeError, SendDeadlinePassed, ServerError, TransportError
from kube.informer import Handlers, Informer
from kube.pool_contract import (
    CLAIMS_PATH,
    LABEL_POOL,
    MAX_CLAIM,
    SANDBOX_CLAIMS,
    ClaimsAnswer,
    ClaimSpec,
    ClaimsRequest,
)
from kube.times import parse_time
from sandman.base.backoff import Backoff
from sandman.base.settings import fixed, setting

__all__ = ["ClaimService", "ClaimSettings", "node_ok"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClaimSettings:
    send_within_s: float = setting(
        0.5,
        help="a claim's write is sent this soon after its pods were picked, or not at all (the "
        "facade then creates them cold); at most placement.valid_for_s, which a new leader "
        "waits out before serving",
    )

    list_backoff: Backoff = fixed(
        Backoff(initial_s=0.2, cap_s=5.0, jitter="equal"),
        why="a new leader's read of every claim is retried until it lands; the delays only "
        "spread the retries out",
    )

    def __post_init__(self) -> None:
        if self.send_within_s <= 0:
            raise ValueError("send_within_s must be > 0")


def node_ok(node: Obj | None) -> bool:
    """A node a pool pod may be handed out on: there, schedulable, Ready."""
    if node is None or (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class ClaimService:
    """:meth:`attach` once (standbys keep the book warm too), :meth:`routes` on the
    controller's HTTP server, :meth:`run_informer` always, :meth:`serve` while leading."""

    def __init__(
        self,
        client: KubeClient,
        view: ClusterView,
        settings: ClaimSettings | None = None,
        *,
        verifier: CallerVerifier | None = None,
        clock: Callable[[], float] = time.monotonic,
        registry: CollectorRegistry | None = None,
    ) -> None:
        # Its own bucket and one attempt: a claim is one write per batch and must not queue
        # behind a burst of binds (a POST is never repeated after an unknown outcome).
        self.client = client.with_rate_limit(0, 1, max_attempts=1)
        #: The new leader's list of every claim: a read, retried as the client retries.
        self.reader = client
        self.view = view
        #: The placement endpoint's caller check (controller/placement_auth.py): a claim
        #: writes a SandboxClaim and hands out sandboxes, so it admits only the facade too.
        self.verifier = verifier
        self.settings = settings or ClaimSettings()
        self._clock = clock
        self.book = ClaimBook(lambda name: node_ok(view.nodes.cache.get(name)))
        self.informer = Informer(
            client,
            SANDBOX_CLAIMS,
            namespace=view.settings.namespace,
            settings=view.settings.informer,
            name="sandbox-claims",
        )
        #: ``namespace/claim`` -> its request digest, for retries.
        self._digests: dict[str, str] = {}
        self._decoder = msgspec.json.Decoder(ClaimsRequest)
        self._encoder = msgspec.json.Encoder()
        self.serving = False
        #: Outcomes, for metrics and tests: hit (all asked), partial, miss (none), replayed,
        #: refused (not serving), failed (the write failed), unauthorized (the caller check).
        self.counts = dict.fromkeys(
            ("hit", "partial", "miss", "replayed", "refused", "failed", "unauthorized"), 0
        )
        #: From a pool pod's creation to the claim that handed it out: how far ahead of
        #: their step announcements fill (a pool that waits hours costs capacity for hours).
        self.time_in_pool = Histogram(
            "sandman_pool_time_in_pool_seconds",
            "Seconds from a pool pod's creation to its claim",
            buckets=(1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 21600),
            registry=registry if registry is not None else CollectorRegistry(),
        )

    def attach(self) -> None:
        self.view.bound.add_handler(
            Handlers(
                add=self.book.pod_seen,
                update=lambda _old, new: self.book.pod_seen(new),
                delete=self.book.pod_gone,
            )
        )
        self.informer.add_handler(
            Handlers(
                add=self._claim_seen,
                update=lambda _old, new: self._claim_seen(new),
                delete=self.book.claim_gone,
            )
        )

    def routes(self) -> list[web.RouteDef]:
        return [web.post(CLAIMS_PATH, self._handle)]

    async def run_informer(self) -> None:
        await self.informer.run()

    async def serve(self) -> None:
        """Serve claims until cancelled (leadership lost); the caller waited out the
        predecessor (controller/app.py)."""
        await self.view.wait_synced()
        await self.informer.wait_synced()
        for claim in await self._list_claims():
            self._claim_seen(claim)
        self.serving = True
        try:
            await _forever()
        finally:
            self.serving = False
            self.book.release_holds()

    async def _list_claims(self) -> list[Obj]:
        """Every SandboxClaim, read fresh: until the read lands (claims are not served before
        it, and a failed read must not end the leadership of the binder and the placements
        beside it)."""
        for attempt in itertools.count(1):
            try:
                listed = await self.reader.list(SANDBOX_CLAIMS, self.view.settings.namespace)
                return list(listed.get("items") or ())
            except KubeError as e:
                delay = self.settings.list_backoff.delay(attempt, e.retry_after_s, random)
                log.warning("listing SandboxClaims failed (%s); again in %.1f s", e, delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    def _claim_seen(self, claim: Obj) -> None:
        meta = claim.get("metadata") or {}
        key = f"{meta.get('namespace') or ''}/{meta.get('name')}"
        self._digests[key] = str((claim.get("spec") or {}).get("requestDigest") or "")
        self.book.claim_seen(claim)

    # --- the endpoint -------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        refused = await refusal(request, self.verifier, self.serving, self.counts)
        if refused is not None:
            return refused
        try:
            body = self._decoder.decode(await request.read())
        except msgspec.DecodeError as e:
            return _error(400, "invalid_request", str(e))
        if not 1 <= body.count <= MAX_CLAIM:
            return _error(400, "invalid_count", f"count: 1 to {MAX_CLAIM}")
        try:
            answer = await self.claim(body)
        except _Reused as e:
            return _error(409, "idempotency_key_reused", str(e))
        return web.Response(body=self._encoder.encode(answer), content_type="application/json")

    async def claim(self, body: ClaimsRequest) -> ClaimsAnswer:
        """Claim up to ``body.count`` pool pods with one write (or answer a retry)."""
        ns, key = body.namespace, (body.namespace, body.image, body.sandbox_class)
        known = self.book.claim_of(ns, body.claim)
        if known is not None:
            return self._replay(f"{ns}/{body.claim}", body, list(known))
        if body.replay_only:
            return ClaimsAnswer(pods=[])
        decided = self._clock()
        pods = self.book.take(key, body.count, body.claim)
        if not pods:
            self.counts["miss"] += 1
            return ClaimsAnswer(pods=[])
        try:
            await self.client.request(
                "POST",
                SANDBOX_CLAIMS.path(ns),
                body=self._object(body, pods, self.book.pool_of(key, pods[0])),
                send_by=decided + self.settings.send_within_s,
            )
        except AlreadyExists:
            self.book.settle(ns, body.claim, pods, written=False)
            stored = await self.client.get(SANDBOX_CLAIMS, body.claim, ns)
            self._claim_seen(stored)
            return self._replay(f"{ns}/{body.claim}", body, stored["spec"]["pods"])
        except (ServerError, TransportError, TimeoutError) as e:
            # Unknown outcome: the pods stay held (never offered again by this leader).
            self.counts["failed"] += 1
            log.warning("claim %s/%s: outcome unknown (%s)", ns, body.claim, e)
            return ClaimsAnswer(pods=[])
        except (SendDeadlinePassed, KubeError) as e:
            self.book.settle(ns, body.claim, pods, written=False)
            self.counts["failed"] += 1
            log.warning("claim %s/%s not written: %s", ns, body.claim, e)
            return ClaimsAnswer(pods=[])
        self.book.settle(ns, body.claim, pods, written=True)
        self._observe_time_in_pool(ns, pods)
        self._digests[f"{ns}/{body.claim}"] = body.request_digest
        self.counts["hit" if len(pods) == body.count else "partial"] += 1
        return ClaimsAnswer(pods=pods)

    def _observe_time_in_pool(self, namespace: str, pods: list[str]) -> None:
        now = dt.datetime.now(dt.UTC)
        for name in pods:
            pod = self.view.bound.cache.get(f"{namespace}/{name}")
            created = parse_time(((pod or {}).get("metadata") or {}).get("creationTimestamp"))
            if created is not None:
                self.time_in_pool.observe(max(0.0, (now - created).total_seconds()))

    def _replay(self, key: str, body: ClaimsRequest, pods: list[str]) -> ClaimsAnswer:
        if self._digests.get(key, "") != body.request_digest:
            raise _Reused(f"claim {key} was made for another request")
        self.counts["replayed"] += 1
        return ClaimsAnswer(pods=list(pods), replayed=True)

    @staticmethod
    def _object(body: ClaimsRequest, pods: list[str], pool: str) -> dict[str, Any]:
        spec = ClaimSpec(
            pool=pool,
            image=body.image,
            sandbox_class=body.sandbox_class,
            pods=pods,
            request_digest=body.request_digest,
            owner=body.owner,
            labels=body.labels,
            expires_at=body.expires_at,
            idle_timeout_s=body.idle_timeout_s,
        )
        labels = {LABEL_POOL: pool, **({LABEL_OWNER: body.owner} if body.owner else {})}
        return {
            "apiVersion": SANDBOX_CLAIMS.api_version,
            "kind": SANDBOX_CLAIMS.kind,
            "metadata": {"name": body.claim, "namespace": body.namespace, "labels": labels},
            "spec": msgspec.to_builtins(spec),
        }


class _Reused(Exception):
    pass


async def _forever() -> None:
    await asyncio.Event().wait()


def _error(status: int, reason: str, message: str) -> web.Response:
    return web.json_response({"reason": reason, "message": message}, status=status)
