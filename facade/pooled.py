"""The pooled source: an order's sandboxes from pool pods created ahead, claimed in one
write per batch; the rest left to the cold sources in the same request.

Why first: a pool pod is Ready already (its image pulled, its daemon answering), so a
claimed sandbox is Ready in milliseconds, where a cold one waits for a create, a kubelet
and a container start. Whatever goes wrong here — no pool for the (image, class), a short
one, no leader, a slow or failing claims endpoint — leaves the members to the next source
(pre-placed, then unbound: facade/preplaced.py, facade/unbound.py), after at most
``claim_timeout_s``: no request fails or waits on a pool.

**One ask per request.** The order's members go to the leading controller's claims endpoint
(controller/claims.py, found on its election Lease as the placements are:
kube/placement.py) as one :class:`~kube.pool_contract.ClaimsRequest` for up to all of them,
named by the request's Idempotency-Key (:func:`~kube.pool_contract.claim_name`). The
leader answers the pods it claimed — one SandboxClaim for the batch, whatever its size —
and member ``i`` of the request is the claim's ``i``-th pod. A retried request gets the
same claim back (``replayed``), so the same pods; a retry some of whose members exist
already asks with ``replay_only`` (it may get the first claim back, never a new one).

**The claim is delivered to each daemon** (``POST /v1/claim``, daemon/sandbox/claim.py)
with the pool token of the pod's announcement: the sandbox's own token (derived from the
pod, facade/tokens.py), the request's env and idle timeout. A lost answer is sent again
(the daemon answers the same claim 204 again); a daemon that never takes it is deleted —
it is the claim's, no one else's — and its member created cold. Until its daemon has
taken the claim a pool sandbox runs nothing, so the create answers only once it has.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import msgspec

from daemon.sandbox.layout import DAEMON_PORT
from kube import PODS, KubeClient, KubeError, NotFound
from kube.contract import ANNOTATION_EXPIRES_AT
from kube.placement import ClaimReused, PlacementClient
from kube.pool_contract import LABEL_POOL, ClaimSpec, ClaimsRequest
from sandman.base.settings import setting
from sandman.wire.daemon import ClaimRequest
from sandman.wire.errors import Reason

from .errors import FacadeError
from .index import SandboxIndex, WaitAborted
from .metrics import FacadeMetrics
from .order import Member, Order, Outcome, Pooling, Refused, Written, concurrently
from .sources import Supply
from .tokens import TokenMinter

__all__ = ["PooledSettings", "PooledSource"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PooledSettings:
    #: 2 s, not less: at the reference burst (119 claims of 100 within 10 s, 2 vCPUs) the
    #: leader answered some claims after 0.25 s, the old default; those orders went cold on
    #: a cluster the pool had filled (5,216 members unschedulable), and a claim abandoned
    #: after the leader wrote it strands its pods until their owner is released. A cold
    #: create under such a burst costs far more than the wait.
    claim_timeout_s: float = setting(
        2.0,
        help="a claims call to the leader that takes longer is abandoned and the whole order "
        "is created cold: the most a pool can add to a create that finds none",
    )
    deliver_timeout_s: float = setting(
        1.0,
        help="each attempt to hand a claimed pod's daemon its claim (POST /v1/claim) is "
        "abandoned after this long",
    )
    deliver_attempts: int = setting(
        2,
        help="attempts to hand a daemon its claim before the pod is deleted and its member "
        "created cold (a repeat is answered 204 again: the same claim)",
    )

    def __post_init__(self) -> None:
        if min(self.claim_timeout_s, self.deliver_timeout_s) <= 0 or self.deliver_attempts < 1:
            raise ValueError("pooled: timeouts must be > 0 and deliver_attempts >= 1")


class PooledSource:
    """Claimed pool pods for an order's members (module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        placer: PlacementClient,
        index: SandboxIndex,
        minter: TokenMinter,
        metrics: FacadeMetrics,
        settings: PooledSettings | None = None,
        *,
        port: int = DAEMON_PORT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.placer = placer
        self.index = index
        self.minter = minter
        self.metrics = metrics
        self.settings = settings or PooledSettings()
        self.port = port
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._encoder = msgspec.json.Encoder()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def supply(self, order: Order) -> Supply:
        pooling = order.pooling
        if pooling is None or order.group is not None or not order.members:
            return Supply(left=order.members)  # groups go to the binder whole
        started = self._clock()
        namespace = order.tenant.namespace
        request = _request(namespace, order.members, pooling)
        try:
            answer = await self.placer.claim(request, self.settings.claim_timeout_s)
        except ClaimReused:
            error = FacadeError(
                "this Idempotency-Key was used for a different request; use a new key",
                reason=Reason.IDEMPOTENCY_KEY_REUSED,
            )
            return Supply({m.index: Refused(error) for m in order.members})
        if answer is None:
            self.metrics.pool_claims.labels("failed").inc()
            return Supply(left=order.members)
        pods = answer.pods
        taken = [m for m in order.members if m.index < len(pods)]
        if not answer.replayed:
            asked = len(order.members)
            outcome = "miss" if not taken else "hit" if len(taken) == asked else "partial"
            self.metrics.pool_claims.labels(outcome).inc()
        if not taken:
            return Supply(left=order.members)
        self.index.claims.note(namespace, pooling.claim, _spec(request, pods))
        delivered = await concurrently(
            [self._deliver(namespace, m, pods[m.index], pooling, answer.replayed) for m in taken]
        )
        outcomes: dict[int, Outcome] = {}
        left = [m for m in order.members if m.index >= len(pods)]
        for member, answered in zip(taken, delivered, strict=True):
            if answered is None:
                left.append(member)
            else:
                outcomes[member.index] = answered
        self.metrics.pool_claimed.inc(len(outcomes))
        self.metrics.pool_claim_seconds.observe(self._clock() - started)
        return Supply(outcomes, tuple(sorted(left, key=lambda m: m.index)))

    async def _deliver(
        self, namespace: str, member: Member, name: str, pooling: Pooling, replayed: bool
    ) -> Outcome | None:
        """The claimed pod's daemon given its claim: the member's sandbox, or None (the pod
        is gone or deleted now, the member left to the cold sources)."""
        try:
            sandbox = await self.index.wait(
                namespace, name, frozenset({"ready"}), self.settings.deliver_timeout_s
            )
        except WaitAborted:
            return None  # the facade is stopping: the member goes on (and ends) with the rest
        pod = self.index.current_pod(namespace, name)
        ip = ((pod or {}).get("status") or {}).get("podIP")
        if pod is None or sandbox is None or sandbox.state != "ready" or not ip:
            log.warning("claimed pool pod %s/%s is not ready here: created cold", namespace, name)
            await self._delete(namespace, name, pod)
            return None
        announcement = pod["metadata"]["labels"][LABEL_POOL]
        body = ClaimRequest(
            claim=pooling.claim,
            token=self.minter.token_of(pod),
            env=dict(pooling.spec.env),
            idle_timeout_s=pooling.spec.idle_timeout_s,
        )
        pool_token = self.minter.pool_token_for(namespace, announcement)
        for attempt in range(1, self.settings.deliver_attempts + 1):
            status = await self._post_claim(ip, pool_token, body)
            if status == 204:
                return Written(sandbox, created=not replayed)
            if status == 409:  # another claim holds it: never ours to delete
                log.error("pool pod %s/%s refused claim %s", namespace, name, pooling.claim)
                return None
            log.info("claim of %s/%s: attempt %d answered %s", namespace, name, attempt, status)
        await self._delete(namespace, name, pod)
        return None

    async def _post_claim(self, ip: str, pool_token: str, body: ClaimRequest) -> int | None:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with (
                asyncio.timeout(self.settings.deliver_timeout_s),
                self._session.post(
                    f"http://{ip}:{self.port}/v1/claim",
                    data=self._encoder.encode(body),
                    headers={
                        "Authorization": f"Bearer {pool_token}",
                        "Content-Type": "application/json",
                    },
                ) as resp,
            ):
                await resp.read()
                return resp.status
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            log.debug("claim delivery to %s failed: %s", ip, type(e).__name__)
            return None

    async def _delete(self, namespace: str, name: str, pod: dict | None) -> None:
        """A claimed pod whose daemon did not take the claim: deleted (it is the claim's,
        and is never handed out again: controller/claim_book.py)."""
        uid = ((pod or {}).get("metadata") or {}).get("uid") or None
        try:
            await self.client.delete(PODS, name, namespace, uid=uid)
        except NotFound:
            pass
        except KubeError as e:
            log.warning("deleting claimed pool pod %s/%s failed: %s", namespace, name, e)


def _request(namespace: str, members: tuple[Member, ...], pooling: Pooling) -> ClaimsRequest:
    spec = pooling.spec
    first = members[0].pod["metadata"]
    return ClaimsRequest(
        namespace=namespace,
        image=spec.image,
        sandbox_class=spec.sandbox_class,
        # Member i is the claim's i-th pod: ask for the members up to the last one handed.
        count=max(m.index for m in members) + 1,
        claim=pooling.claim,
        request_digest=pooling.digest,
        owner=spec.owner,
        labels=dict(spec.labels),
        expires_at=(first.get("annotations") or {}).get(ANNOTATION_EXPIRES_AT),
        idle_timeout_s=spec.idle_timeout_s,
        replay_only=pooling.replay_only,
    )


def _spec(request: ClaimsRequest, pods: list[str]) -> ClaimSpec:
    """The claim as the leader wrote it (its pool is the watch's to tell)."""
    return ClaimSpec(
        pool="",
        image=request.image,
        sandbox_class=request.sandbox_class,
        pods=list(pods),
        request_digest=request.request_digest,
        owner=request.owner,
        labels=dict(request.labels),
        expires_at=request.expires_at,
        idle_timeout_s=request.idle_timeout_s,
    )
