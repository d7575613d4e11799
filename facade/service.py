"""The facade's operations on sandboxes: create (one or a batch), get/wait, list, release.

Writes per sandbox: one pod create, one delete (or a share of one deletecollection). Reads
come from :class:`~facade.index.SandboxIndex`, never from the API server.

**Idempotency without a database.** A create with an ``Idempotency-Key`` gets a pod name
derived from the tenant and the key (member ``i`` of a batch: from the key and ``i``), so a
retried request can only ever hit the same pods: the API server's AlreadyExists *is* the
duplicate check, across facade replicas and restarts. The pod carries a digest of the request;
the same key with a different spec is a 409 ``idempotency_key_reused``, not a silent reuse.
A batch's digest covers its count too, and its first pending member is created alone before
the rest: a key reused with another count meets that member's digest and is refused whole,
instead of silently creating the members the first request never had.
Every create is therefore safe to repeat and is retried by the client layer after a 5xx.

**Continue tokens** are opaque to trainers but checked here: a token this facade did not
issue is a 400 ``invalid_continue``, never a listing silently restarted from the beginning.

**A refused create** (403 not from a ResourceQuota: the facade's RBAC lacks ``create`` on
pods in the tenant's namespace) is the operator's to fix, not the trainer's: the trainer
gets a 502 ``cluster_forbidden`` and the facade's log an error naming the 403.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec

from kube import (
    PODS,
    AlreadyExists,
    Forbidden,
    KubeClient,
    KubeError,
    NotFound,
)
from kube.cache import Obj
from kube.contract import (
    ANNOTATION_GROUP,
    ANNOTATION_GROUP_SIZE,
    ANNOTATION_REQUEST_DIGEST,
    LABEL_OWNER,
)
from kube.placement import Placement, PlacementClient
from sandman.wire.facade import (
    BatchFailure,
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

from .batch import BatchMembers, CreatePod
from .errors import FacadeError, from_kube_error
from .index import SandboxIndex, WaitAborted
from .leases import OwnerLeaseWriter
from .metrics import FacadeMetrics
from .podspec import DaemonDelivery, PodSpecError, SandboxClass, SandboxRequest, render_pod
from .preplace import PlacementRanOut, PrePlacement
from .tenancy import Tenant, TenantDirectory
from .tokens import TokenMinter
from .window import SendWindow, WindowSizing

__all__ = ["SandboxService", "ServiceSettings"]

log = logging.getLogger(__name__)

WAIT_UNTIL: dict[str, frozenset[SandboxState]] = {
    "ready": frozenset({"ready"}),
    "started": frozenset({"starting", "ready"}),
    "final": frozenset(),  # until failed, terminated or releasing
}


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    #: Unbound pod creates of one batch in flight at once (the client's token bucket still
    #: applies); a pre-placed batch sends all of a part's creates at once, its parts no
    #: larger than the send window below, since each must go out within its placement's
    #: second.
    batch_concurrency: int = 64
    #: Pre-placed creates unanswered at once, all batches together (facade/window.py): a
    #: batch asks for placements only when it fits, so its creates are sent within ~the
    #: window / the granted rate of the answer, inside its ~1 s validity. The capacity
    #: follows the grant the client's pacer has seen (0.25 s of it, ~50 at 200/s; the
    #: maximum while the server refused nothing), between ``minimum`` and ``maximum``; a
    #: larger batch goes in parts.
    preplaced_window: WindowSizing = field(default_factory=WindowSizing)
    #: Unbound creates unanswered at once (binder mode, groups): about what the server's
    #: queue holds (500/s x 0.25 s in the reference profile); more in flight are answered
    #: 429 and sent again (a create + bind burst drew 6-10% 429s with 256 in flight).
    unbound_in_flight: int = 128


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
        self.tenants = tenants
        self.classes = classes
        self.delivery = delivery
        self.minter = minter
        self.metrics = metrics
        self.settings = settings or ServiceSettings()
        self.leases = OwnerLeaseWriter(client)
        #: Pre-placed creation (facade/preplace.py); None: binder mode, every pod unbound.
        self.unbound_window = SendWindow(self.settings.unbound_in_flight)
        self.fast = (
            None
            if placer is None
            else PrePlacement(client, placer, self.settings.preplaced_window, metrics, _template)
        )

    # --- create ---------------------------------------------------------------------------
    async def create(
        self, tenant: Tenant, spec: CreateSandbox, key: str | None
    ) -> tuple[Sandbox, bool]:
        """The sandbox and whether this call created it (False: an idempotent replay)."""
        sid = _sandbox_id(tenant, key)
        existing = self._replay(tenant, sid, _digest(spec))
        if existing is not None:
            return existing, False
        self._admit(tenant, 1)
        pod = self._render(tenant, spec, sid, _digest(spec))
        if self.fast is None:
            async with self.unbound_window.hold(1):
                return await self._create_pod(tenant, pod)
        async with self.fast.sending(1):
            placed = await self.fast.place(tenant.namespace, {0: pod})
            try:
                return await self._create_pod(tenant, pod, placed.get(sid), fast=True, last=False)
            except PlacementRanOut:  # asked for once more, then unbound
                again = await self.fast.place(tenant.namespace, {0: pod})
                return await self._create_pod(tenant, pod, again.get(sid), fast=True)

    async def create_batch(
        self, tenant: Tenant, batch: CreateBatch, key: str | None
    ) -> BatchResult:
        digest = _digest(batch)
        ids = [_sandbox_id(tenant, key, i) for i in range(batch.count)]
        results: list[Sandbox | BatchFailure | None] = [
            self._replay(tenant, sid, digest) for sid in ids
        ]
        todo = [i for i, r in enumerate(results) if r is None]
        if todo:
            self._admit(tenant, len(todo))
            pods = {i: self._render(tenant, batch.spec, ids[i], digest) for i in todo}
            if batch.group is not None:
                for pod in pods.values():
                    annotations = pod["metadata"]["annotations"]
                    annotations[ANNOTATION_GROUP] = batch.group
                    annotations[ANNOTATION_GROUP_SIZE] = str(batch.count)
            members = BatchMembers(self._member_create(tenant), tenant.namespace, ids, results)
            if self.fast is None or batch.group is not None:
                async with self.unbound_window.hold(len(todo)):
                    await members.unbound(pods, self.settings.batch_concurrency)
            else:
                await members.preplaced(pods, self.fast)
        sandboxes = [r for r in results if isinstance(r, Sandbox)]
        failed = [r for r in results if isinstance(r, BatchFailure)]
        return BatchResult(sandboxes=sandboxes, failed=failed)

    def _member_create(self, tenant: Tenant) -> CreatePod:
        async def create(
            pod: Obj, placement: Placement | None, *, fast: bool, last: bool
        ) -> Sandbox:
            sandbox, _ = await self._create_pod(tenant, pod, placement, fast=fast, last=last)
            return sandbox

        return create

    def _replay(self, tenant: Tenant, sid: str, digest: str) -> Sandbox | None:
        pod = self.index.current_pod(tenant.namespace, sid)
        if pod is None:
            return None
        _check_digest(pod, digest)
        return self.index.get(tenant.namespace, sid)

    def _admit(self, tenant: Tenant, count: int) -> None:
        admission = self.tenants.admit(tenant, count, self.index.live(tenant.namespace))
        if not admission.allowed:
            self.metrics.admission_rejections.labels(tenant.name, admission.reason).inc()
            status = 400 if admission.reason == "batch_too_large" else 429
            raise FacadeError(
                status,
                admission.reason,
                admission.message,
                retry_after_s=admission.retry_after_s if status == 429 else None,
            )

    def _render(self, tenant: Tenant, spec: CreateSandbox, sid: str, digest: str) -> Obj:
        sandbox_class = self.classes.get(spec.sandbox_class)
        if sandbox_class is None:
            known = ", ".join(sorted(self.classes))
            raise FacadeError(
                400, "unknown_class", f"no sandbox class {spec.sandbox_class!r} (known: {known})"
            )
        request = SandboxRequest(
            image=spec.image,
            owner=spec.owner,
            ttl_s=spec.ttl_s,
            idle_timeout_s=spec.idle_timeout_s,
            env=spec.env,
            labels=spec.labels,
        )
        try:
            pod = render_pod(
                request,
                sandbox_class,
                self.delivery,
                name=sid,
                namespace=tenant.namespace,
                tenant=tenant.name,
                token=self.minter.token_for(tenant.namespace, sid),
                now=datetime.now(UTC),
            )
        except PodSpecError as e:
            raise FacadeError(400, e.reason, str(e)) from e
        pod["metadata"]["annotations"][ANNOTATION_REQUEST_DIGEST] = digest
        return pod

    async def _create_pod(
        self,
        tenant: Tenant,
        pod: Obj,
        placement: Placement | None = None,
        *,
        fast: bool = False,
        last: bool = True,
    ) -> tuple[Sandbox, bool]:
        """``fast``: through :attr:`fast` (its token taken: ``placement``, or unbound);
        ``last`` False: a placement that ran out raises :class:`PlacementRanOut`."""
        ns, sid = tenant.namespace, pod["metadata"]["name"]
        try:
            if fast:
                assert self.fast is not None
                created = await self.fast.post(ns, pod, placement, last=last)
            else:
                created = await self._post_unbound(ns, pod)
        except AlreadyExists:
            # A retry of a create that landed (ours, another replica's, or a lost response).
            existing = await self._fetch(ns, sid)
            _check_digest(existing, pod["metadata"]["annotations"][ANNOTATION_REQUEST_DIGEST])
            self.index.note_created(existing)
            view = self.index.get(ns, sid)
            assert view is not None
            return view, False
        except Forbidden as e:
            raise _quota_or_forbidden(e) from e
        except KubeError as e:
            raise from_kube_error(e, "creating the sandbox pod") from e
        self.metrics.created.labels(tenant.name).inc()
        self.index.note_created(created)
        view = self.index.get(ns, sid)
        assert view is not None
        return view, True

    async def _post_unbound(self, ns: str, pod: Obj) -> Obj:
        created: Obj = await self.client.request(
            "POST", PODS.path(ns), body=pod, idempotent=True, lean=True
        )
        self.metrics.creates.labels("unbound").inc()
        return created

    async def _fetch(self, ns: str, sid: str) -> Obj:
        cached = self.index.current_pod(ns, sid)
        if cached is not None:
            return cached
        try:
            pod: Obj = await self.client.get(PODS, sid, ns)
        except KubeError as e:
            raise from_kube_error(e, "reading the existing sandbox pod") from e
        return pod

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
                503, "facade_stopping", "this facade is stopping; retry", retry_after_s=1.0
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


def _template(pod: Obj) -> Obj:
    """What the leader needs to plan ``pod``'s batch: no names, no env (it holds the
    sandbox's daemon token)."""

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


def _sandbox_id(tenant: Tenant, key: str | None, member: int | None = None) -> str:
    if not key:
        return f"sb-{secrets.token_hex(10)}"
    material = f"{tenant.name}\0{key}" if member is None else f"{tenant.name}\0{key}\0{member}"
    return f"sb-{hashlib.sha256(material.encode()).hexdigest()[:20]}"


def _digest(request: CreateSandbox | CreateBatch) -> str:
    return hashlib.sha256(msgspec.json.encode(request, order="sorted")).hexdigest()[:32]


def _check_digest(pod: Obj, digest: str) -> None:
    found = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_REQUEST_DIGEST)
    if found is not None and found != digest:
        raise FacadeError(
            409,
            "idempotency_key_reused",
            "this Idempotency-Key was used for a different request; use a new key",
        )


def _check_owner(owner: str) -> None:
    """The handlers validate owners already; the service does not rely on it."""
    try:
        msgspec.convert(owner, OwnerName)
    except msgspec.ValidationError as e:
        raise FacadeError(400, "invalid_owner", f"owner {owner!r}: {e}") from e


def _not_found(sid: str) -> FacadeError:
    return FacadeError(404, "sandbox_not_found", f"no sandbox {sid!r}")


def _quota_or_forbidden(e: Forbidden) -> FacadeError:
    if "exceeded quota" in str(e):
        return FacadeError(429, "quota_exceeded", str(e), retry_after_s=5.0)
    log.error("sandbox create forbidden (403): the facade's RBAC lacks create on pods: %s", e)
    return FacadeError(502, "cluster_forbidden", f"the API server refused the create: {e}")


_CONTINUE = b"sandman-page-v1:"


def _encode_continue(sid: str) -> str:
    """The position after ``sid``: base64url (no padding) of a marked id and its check."""
    raw = _CONTINUE + sid.encode()
    check = hashlib.sha256(raw).hexdigest()[:8].encode()
    return base64.urlsafe_b64encode(raw + b"/" + check).decode().rstrip("=")


def _decode_continue(token: str) -> str:
    """The id a token of ours continues after; 400 for anything we would not issue (made
    up, truncated, altered)."""
    invalid = FacadeError(400, "invalid_continue", "the continue token is not one we issued")
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        marked = raw.rpartition(b"/")[0]
        sid = marked.removeprefix(_CONTINUE).decode() if marked.startswith(_CONTINUE) else ""
    except (ValueError, UnicodeDecodeError) as e:
        raise invalid from e
    if not sid or _encode_continue(sid) != token:
        raise invalid
    return sid
