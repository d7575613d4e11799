"""The create path: a request flows one way, and a single create is a batch of one.

    request ─▶ replay? ─▶ admission ─▶ render ─▶ order ─▶ sources ─▶ pod writer ─▶ API
    (ids,      (watch     (rate, quota, (podspec)  (order.py) (in turn:  (writer.py)
     digest)    cache)     class)                             sources.py)     │
                                                answer ◀── each member's outcome ◀┘

Each step hands the next one data and gets data back, never a callback: the sources
(pre-placed, unbound; facade/service.py lists them) are handed an :class:`~facade.order.Order`
and answer with the members they wrote or left, the writer answers each pod's create with
an outcome, and only the answer here turns a refused member into an HTTP error (a single
create) or a ``failed`` entry (a batch).

**The first member alone.** A key's pods may have been created by another replica for
another request, not yet in our watch cache: the first member still to create is therefore
created on its own, through all the sources, before any other member. If it meets a pod of
another request (its digest differs: facade/idempotency.py), the whole batch is refused
with 409 ``idempotency_key_reused`` while no other member exists, instead of silently
creating the members the first request never had. The rest then go as one order.

**Pooled first, whole.** Before the waves the whole order is offered to the pooled source
(facade/pooled.py) with the request's claim: one claims call per request, named by its
Idempotency-Key, so it cannot go member by member. It needs no first member alone: the
leader refuses a claim of another request itself (409). Member ``i`` is the claim's
``i``-th pod, so a retry finds its pooled members through the claim in the watch cache
(facade/claimed.py), as it finds its cold ones by name; what the pool did not cover goes
on in waves to the cold sources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from kube.cache import Obj
from kube.pool_contract import claim_name
from sandman.wire.errors import Reason
from sandman.wire.facade import BatchFailure, BatchResult, CreateBatch, CreateSandbox, Sandbox

from .errors import FacadeError
from .fairness import check_class, check_image
from .idempotency import request_digest, reused_key, sandbox_id
from .index import SandboxIndex
from .metrics import FacadeMetrics
from .order import Member, Order, Outcome, Pooling, Refused, Written
from .podspec import DaemonDelivery, SandboxClass, render_pod
from .sources import SandboxSource, supply_in_turn
from .tenancy import Tenant, TenantDirectory
from .tokens import TokenMinter

__all__ = ["CreatePath"]

#: The answer that refuses a whole batch when its first member meets it (module docstring).


@dataclass(frozen=True, slots=True)
class _Request:
    """A create as this path sees it: one sandbox (one id) or a batch's (an id each)."""

    spec: CreateSandbox
    #: The pod names, by member index (facade/idempotency.py).
    ids: tuple[str, ...]
    #: What an Idempotency-Key is used for: the whole request (a batch's count included).
    digest: str
    #: The request's SandboxClaim, if pooled members it gets are recorded in one.
    claim: str
    group: str | None = None


class CreatePath:
    """``create`` one sandbox or ``create_batch``: the same path (module docstring)."""

    def __init__(
        self,
        index: SandboxIndex,
        tenants: TenantDirectory,
        classes: Mapping[str, SandboxClass],
        delivery: DaemonDelivery,
        minter: TokenMinter,
        metrics: FacadeMetrics,
        sources: Sequence[SandboxSource],
        pooled: SandboxSource | None = None,
    ) -> None:
        self.index = index
        self.tenants = tenants
        self.classes = classes
        self.delivery = delivery
        self.minter = minter
        self.metrics = metrics
        #: Offered each order in turn; the last one takes every member left to it.
        self.sources = tuple(sources)
        #: Offered each whole order before them (module docstring); None: no pools.
        self.pooled = pooled

    async def create(
        self, tenant: Tenant, spec: CreateSandbox, key: str | None
    ) -> tuple[Sandbox, bool]:
        """The sandbox and whether this call created it (False: an idempotent replay)."""
        digest = request_digest(spec)
        request = _Request(spec, (sandbox_id(tenant, key),), digest, _claim(tenant, key))
        (outcome,) = await self._create(tenant, request)
        if isinstance(outcome, Refused):
            raise outcome.error
        return outcome.sandbox, outcome.created

    async def create_batch(
        self, tenant: Tenant, batch: CreateBatch, key: str | None
    ) -> BatchResult:
        ids = tuple(sandbox_id(tenant, key, i) for i in range(batch.count))
        request = _Request(batch.spec, ids, request_digest(batch), _claim(tenant, key), batch.group)
        outcomes = await self._create(tenant, request)
        return BatchResult(
            sandboxes=[o.sandbox for o in outcomes if isinstance(o, Written)],
            failed=[_failure(i, o.error) for i, o in enumerate(outcomes) if isinstance(o, Refused)],
        )

    async def _create(self, tenant: Tenant, request: _Request) -> list[Outcome]:
        """Each member's outcome: replayed from the watch cache, or created now."""
        outcomes = self._replays(tenant, request)
        todo = [i for i in range(len(request.ids)) if i not in outcomes]
        if todo:
            cold = len(todo) - self._claimable(tenant, request, len(todo), bool(outcomes))
            sandbox_class = self._admit(tenant, request.spec, cold)
            members = (Member(i, self._render(tenant, request, sandbox_class, i)) for i in todo)
            pooling = Pooling(request.spec, request.digest, request.claim, bool(outcomes))
            order = Order(tenant, tuple(members), request.group, pooling)
            outcomes |= await self._in_waves(order)
        return [outcomes[i] for i in range(len(request.ids))]

    def _replays(self, tenant: Tenant, request: _Request) -> dict[int, Outcome]:
        """The members the watch cache has already (a 409 if one is another request's)."""
        replays: dict[int, Outcome] = {}
        for i, sid in enumerate(request.ids):
            pod = self.index.current_pod(tenant.namespace, sid)
            if pod is None:
                continue
            if (reused := reused_key(pod, request.digest)) is not None:
                raise reused
            if (sandbox := self.index.get(tenant.namespace, sid)) is not None:
                replays[i] = Written(sandbox, created=False)
        claimed = self.index.claims.claim(tenant.namespace, request.claim)
        if claimed is not None:
            if claimed.spec.request_digest != request.digest:
                raise FacadeError(
                    "this Idempotency-Key was used for a different request; use a new key",
                    reason=Reason.IDEMPOTENCY_KEY_REUSED,
                )
            for i, name in enumerate(claimed.spec.pods[: len(request.ids)]):
                if i not in replays and (sandbox := self.index.get(tenant.namespace, name)):
                    replays[i] = Written(sandbox, created=False)
        return replays

    def _claimable(self, tenant: Tenant, request: _Request, todo: int, replaying: bool) -> int:
        """How many of the ``todo`` members the pool can hand over now (none for a group, a
        retry that may only get its first claim back, or without the pooled source). Those
        are admitted already: a pool pod counts against the tenant's limit from its creation,
        so counting them again would refuse the step an announcement was sized for."""
        if self.pooled is None or request.group is not None or replaying:
            return 0
        spec = request.spec
        return self.index.claimable(tenant.namespace, spec.image, spec.sandbox_class, todo)

    def _admit(self, tenant: Tenant, spec: CreateSandbox, count: int) -> SandboxClass:
        """The class of ``count`` more sandboxes of ``tenant``, if it may create them now:
        429 + Retry-After beyond its rate or quota, 400 for a batch over its quota or a class
        this facade does not offer, 403 for a class or registry the tenant may not use
        (facade/fairness.py; checked first, so a refused create takes no rate token)."""
        check_class(tenant, spec.sandbox_class)
        check_image(tenant, spec.image)
        admission = self.tenants.admit(tenant, count, self.index.live(tenant.namespace))
        if admission.reason is not None:
            self.metrics.admission_rejections.labels(tenant.name, admission.reason).inc()
            raise FacadeError(
                admission.message,
                reason=admission.reason,
                retry_after_s=admission.retry_after_s if admission.reason.status == 429 else None,
            )
        sandbox_class = self.classes.get(spec.sandbox_class)
        if sandbox_class is None:
            known = ", ".join(sorted(self.classes))
            raise FacadeError(
                f"no sandbox class {spec.sandbox_class!r} (known: {known})",
                reason=Reason.UNKNOWN_CLASS,
            )
        return sandbox_class

    def _render(
        self, tenant: Tenant, request: _Request, sandbox_class: SandboxClass, member: int
    ) -> Obj:
        sid, group = request.ids[member], request.group
        salt = self.minter.new_salt()
        return render_pod(
            request.spec,
            sandbox_class,
            self.delivery,
            name=sid,
            namespace=tenant.namespace,
            tenant=tenant.name,
            token=self.minter.token_for(tenant.namespace, sid, salt),
            token_salt=salt,
            now=datetime.now(UTC),
            digest=request.digest,
            group=None if group is None else (group, len(request.ids)),
        )

    async def _in_waves(self, order: Order) -> dict[int, Outcome]:
        """The order's rendered pods through the sources: the first member alone, then the
        rest (module docstring); a key reused by another request refuses the whole order."""
        outcomes: dict[int, Outcome] = {}
        members = order.members
        if self.pooled is not None and order.pooling is not None:
            supply = await self.pooled.supply(order)
            refused = [o for o in supply.outcomes.values() if isinstance(o, Refused)]
            if refused and refused[0].error.reason is Reason.IDEMPOTENCY_KEY_REUSED:
                raise refused[0].error
            outcomes |= supply.outcomes
            members = supply.left
        first = members[:1]
        for wave in (first, members[1:]):
            if not wave:
                continue
            outcomes |= await supply_in_turn(self.sources, Order(order.tenant, wave, order.group))
            answer = outcomes[first[0].index]
            reused = Reason.IDEMPOTENCY_KEY_REUSED
            if wave is first and isinstance(answer, Refused) and answer.error.reason is reused:
                raise answer.error
        return outcomes


def _claim(tenant: Tenant, key: str | None) -> str:
    """The request's SandboxClaim: named by its tenant and Idempotency-Key, or a new name
    for a request without a key (it is never retried)."""
    return claim_name(f"{tenant.name}\0{key}" if key else sandbox_id(tenant, None))


def _failure(index: int, e: FacadeError) -> BatchFailure:
    return BatchFailure(
        index=index,
        reason=e.reason,
        message=e.message,
        status=e.status,
        retry_after_s=e.retry_after_s,
    )
