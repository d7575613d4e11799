"""The facade's operations on sandboxes: create (one or a batch), get/wait, list, release.

Writes per sandbox: one pod create, one delete (or a share of one deletecollection). Reads
come from :class:`~facade.index.SandboxIndex`, never from the API server.

Why the create is not here: it is a path of its own that flows one way (facade/create.py:
admission, the sandbox sources, the pod writer). This module builds it — the one place that
lists the sources, in the order they are tried — and hands creates to it.

**Continue tokens** are opaque to trainers but checked here: a token this facade did not
issue is a 400 ``invalid_continue``, never a listing silently restarted from the beginning.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
from dataclasses import dataclass

import msgspec

from kube import PODS, KubeClient, KubeError, NotFound
from kube.contract import LABEL_OWNER
from kube.placement import PlacementClient
from sandman.base.settings import part, setting
from sandman.wire.errors import Reason
from sandman.wire.facade import (
    BatchResult,
    CreateBatch,
    CreateSandbox,
    LeaseStatus,
    OwnerName,
    OwnerReleased,
    Sandbox,
    SandboxList,
    SandboxState,
)

from .create import CreatePath
from .errors import FacadeError, from_kube_error
from .index import SandboxIndex, WaitAborted
from .leases import OwnerLeaseWriter
from .metrics import FacadeMetrics
from .podspec import DaemonDelivery, SandboxClass
from .pooled import PooledSettings, PooledSource
from .preplaced import PrePlacedSource
from .sources import SandboxSource
from .tenancy import Tenant, TenantDirectory
from .tokens import TokenMinter
from .unbound import UnboundSource
from .window import WindowSizing
from .writer import PodWriter

__all__ = ["SandboxService", "ServiceSettings"]

WAIT_UNTIL: dict[str, frozenset[SandboxState]] = {
    "ready": frozenset({"ready"}),
    "started": frozenset({"starting", "ready"}),
    "final": frozenset(),  # until failed, terminated or releasing
}


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    batch_concurrency: int = setting(
        64,
        help="unbound pod creates of one batch in flight at once (the client's token bucket "
        "still applies); a pre-placed batch sends all of a part's creates at once, its parts "
        "no larger than the send window, since each must go out within its placement's second",
    )
    preplaced_window: WindowSizing = part(
        WindowSizing,
        help="pre-placed creates unanswered at once, all batches together (facade/window.py): "
        "a batch asks for placements only when it fits; the capacity follows the grant the "
        "client's pacer has seen, between minimum and maximum; a larger batch goes in parts",
    )
    unbound_in_flight: int = setting(
        128,
        help="unbound creates unanswered at once (binder mode, groups, and what pre-placed "
        "creation left: facade/unbound.py): about what the "
        "server's queue holds (500/s x 0.25 s in the reference profile); more in flight are "
        "answered 429 and sent again (a create + bind burst drew 6-10% 429s with 256)",
    )
    pooled: PooledSettings | None = part(
        PooledSettings,
        help="creates claim Ready pool pods from the leading controller first (facade/pooled.py; "
        "needs pre-placed creation and the SandboxClaim CRD), the rest created cold in the "
        "same request; off: every create is cold",
        optional=True,
    )


class SandboxService:
    def __init__(
        self,
        client: KubeClient,
        index: SandboxIndex,
        tenants: TenantDirectory,
        classes: dict[str, SandboxClass],
        delivery: DaemonDelivery,
        minter: TokenMinter,
        metrics: FacadeMetrics,
        settings: ServiceSettings | None = None,
        placer: PlacementClient | None = None,
    ) -> None:
        self.client = client
        self.index = index
        #: What the handlers read beside the create path: ``GET /v1/classes``, the proxy's tokens.
        self.classes = classes
        self.minter = minter
        self.metrics = metrics
        self.settings = settings or ServiceSettings()
        self.leases = OwnerLeaseWriter(client)
        writer = PodWriter(client, index, metrics)
        s = self.settings
        #: Pre-placed creation (facade/preplaced.py); None: binder mode, every pod unbound.
        self.preplaced = (
            None if placer is None else PrePlacedSource(client, placer, s.preplaced_window, writer)
        )
        self.unbound = UnboundSource(writer, s.unbound_in_flight, s.batch_concurrency)
        #: Pools (facade/pooled.py): offered each whole order first; None without a leader
        #: to claim from (binder mode) or with pools off.
        self.pooled = (
            None
            if placer is None or s.pooled is None
            else PooledSource(client, placer, index, minter, metrics, s.pooled)
        )
        #: The sources a create is offered to, in turn (facade/sources.py; docs/facade.md,
        #: "Sandbox sources"): one line each; the last, unbound, takes what the others left.
        sources: tuple[SandboxSource | None, ...] = (
            self.preplaced,
            self.unbound,
        )
        in_turn = [source for source in sources if source is not None]
        self.creation = CreatePath(
            index, tenants, classes, delivery, minter, metrics, in_turn, pooled=self.pooled
        )

    # --- create ---------------------------------------------------------------------------
    async def create(
        self, tenant: Tenant, spec: CreateSandbox, key: str | None
    ) -> tuple[Sandbox, bool]:
        """The sandbox and whether this call created it (False: an idempotent replay)."""
        return await self.creation.create(tenant, spec, key)

    async def create_batch(
        self, tenant: Tenant, batch: CreateBatch, key: str | None
    ) -> BatchResult:
        return await self.creation.create_batch(tenant, batch, key)

    # --- read -----------------------------------------------------------------------------
    def get(self, tenant: Tenant, sid: str) -> Sandbox:
        sandbox = self.index.get(tenant.namespace, sid)
        if sandbox is None:
            raise _not_found(sid)
        return sandbox

    async def wait(self, tenant: Tenant, sid: str, until: str, timeout_s: float) -> Sandbox:
        """``until`` and ``timeout_s`` as validated by the wire model (``GetQuery``)."""
        try:
            sandbox = await self.index.wait(tenant.namespace, sid, WAIT_UNTIL[until], timeout_s)
        except WaitAborted as e:
            raise FacadeError(
                "this facade is stopping; retry", reason=Reason.FACADE_STOPPING, retry_after_s=1.0
            ) from e
        if sandbox is None:
            raise _not_found(sid)
        return sandbox

    def list(
        self,
        tenant: Tenant,
        *,
        owner: str | None,
        labels: dict[str, str],
        state: str | None,
        limit: int,
        after: str | None,
    ) -> SandboxList:
        """Filters and ``limit`` as validated by the wire model (``ListQuery``)."""
        start = _decode_continue(after) if after is not None else ""
        items: list[Sandbox] = []
        ids = self.index.sandbox_ids(tenant.namespace, owner)
        for sid in ids:
            if sid <= start:
                continue
            sandbox = self.index.get(tenant.namespace, sid)
            if sandbox is None or (state and sandbox.state != state):
                continue
            if any(sandbox.labels.get(k) != v for k, v in labels.items()):
                continue
            items.append(sandbox)
            if len(items) == limit:
                more = sid != ids[-1]
                return SandboxList(items=items, next=_encode_continue(sid) if more else None)
        return SandboxList(items=items)

    # --- release --------------------------------------------------------------------------
    async def release(self, tenant: Tenant, sid: str) -> Sandbox:
        ns = tenant.namespace
        pods = self.index.pods(ns, sid)
        sandbox = self.index.get(ns, sid)
        if not pods or sandbox is None:
            raise _not_found(sid)
        for pod in pods:
            meta = pod["metadata"]
            try:
                await self.client.delete(PODS, meta["name"], ns, uid=meta.get("uid") or None)
            except NotFound:
                pass
            except KubeError as e:
                raise from_kube_error(e, "deleting the sandbox pod") from e
        self.index.note_released(ns, sid)
        self.metrics.released.labels(tenant.name).inc()
        return msgspec.structs.replace(sandbox, state="releasing", reason=None, message=None)

    async def release_owner(self, tenant: Tenant, owner: str) -> OwnerReleased:
        _check_owner(owner)  # it goes into a label selector: "a,b" would widen it
        ns = tenant.namespace
        ids = [
            sid
            for sid in self.index.sandbox_ids(ns, owner)
            if (s := self.index.get(ns, sid)) is not None and s.state != "releasing"
        ]
        try:
            await self.client.delete_collection(PODS, ns, label_selector=f"{LABEL_OWNER}={owner}")
            # Claimed pool sandboxes carry their owner in their claim, not a label: one
            # delete each (their share of a release, as a cold sandbox's).
            for sid in self.index.claims.pods_of_owner(ns, owner):
                for pod in self.index.pods(ns, sid):
                    meta = pod["metadata"]
                    with contextlib.suppress(NotFound):
                        await self.client.delete(PODS, meta["name"], ns, uid=meta.get("uid"))
        except KubeError as e:
            raise from_kube_error(e, "deleting the owner's sandboxes") from e
        await self.leases.delete(ns, owner)
        for sid in ids:
            self.index.note_released(ns, sid)
        self.metrics.released.labels(tenant.name).inc(len(ids))
        return OwnerReleased(owner=owner, released=len(ids))

    async def renew_lease(self, tenant: Tenant, owner: str, duration_s: int) -> LeaseStatus:
        _check_owner(owner)
        return await self.leases.renew(tenant.namespace, owner, duration_s)


def _check_owner(owner: str) -> None:
    """The handlers validate owners already; the service does not rely on it."""
    try:
        msgspec.convert(owner, OwnerName)
    except msgspec.ValidationError as e:
        raise FacadeError(f"owner {owner!r}: {e}", reason=Reason.INVALID_OWNER) from e


def _not_found(sid: str) -> FacadeError:
    return FacadeError(f"no sandbox {sid!r}", reason=Reason.SANDBOX_NOT_FOUND)


_CONTINUE = b"sandman-page-v1:"


def _encode_continue(sid: str) -> str:
    """The position after ``sid``: base64url (no padding) of a marked id and its check."""
    raw = _CONTINUE + sid.encode()
    check = hashlib.sha256(raw).hexdigest()[:8].encode()
    return base64.urlsafe_b64encode(raw + b"/" + check).decode().rstrip("=")


def _decode_continue(token: str) -> str:
    """The id a token of ours continues after; 400 for anything we would not issue (made
    up, truncated, altered)."""
    invalid = FacadeError("the continue token is not one we issued", reason=Reason.INVALID_CONTINUE)
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        marked = raw.rpartition(b"/")[0]
        sid = marked.removeprefix(_CONTINUE).decode() if marked.startswith(_CONTINUE) else ""
    except (ValueError, UnicodeDecodeError) as e:
        raise invalid from e
    if not sid or _encode_continue(sid) != token:
        raise invalid
    return sid
