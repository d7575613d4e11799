"""Trainer-announced preparation: ``POST /v1/prepare`` and ``GET /v1/prepare/{id}``.

A trainer that knows step t+1's tasks while step t's rollouts run announces their images
(with the number of sandboxes expected for each); the pulls then overlap the rollouts instead
of delaying the next burst. The facade does not decide anything here: an announcement is one
``ImagePreparation`` object in the tenant's namespace — the very object the controller
already acts on for an operator's standing requests (controller/image_preparer.py) — and its
progress is that object's ``status``, rendered for the trainer with an ETA.

Why per tenant: the object lives in the tenant's namespace, so one tenant can neither read
nor release another's announcement (a ``GET`` of another tenant's id is a 404), and the
tenant's RBAC and quotas in the cluster apply to it as to its pods. The announcement counts
for ``ttl_s`` (``expiresAt`` on the object; the controller then releases its images), so a
trainer that crashes does not pin images on disks forever.

Tied to its owner: an announcement with an ``owner`` (the SDK sends its own) carries the
owner label, so releasing the owner (``DELETE /v1/sandboxes?owner=``) deletes it with the
sandboxes, and the controller's owner-lease collector deletes it when the owner's Lease
expires (controller/owners.py) — a crashed trainer's images stop counting within one lease
duration instead of its ``ttl_s``.

Per-tenant caps (``max_prepared_images``, ``max_prepared_sandboxes`` in the tenants file):
the distinct images and the expected sandboxes over the tenant's live announcements (one
LIST of its namespace per create, serialized per tenant in this replica; two replicas
creating at once may pass a cap by one announcement). One announcement over a cap alone is
a 400 ``prepare_too_large``; one that would take the tenant over it is a 429
``prepare_quota_exceeded`` (it fits once announcements expire or their owner goes).

Announced sandboxes (``sandboxes: true``): the announcement asks for ``count`` pool sandboxes
per image, of ``class``, which the leading controller creates ahead (controller/pools.py).
The facade checks the class as a create does (400 ``unknown_class``, 403
``class_not_allowed``) and the counts against the tenant's ``max_sandboxes``: the pool's
sandboxes are live sandboxes of the tenant, so an announcement bigger than the limit alone
is a 400 ``prepare_too_large``, and one that would take live sandboxes plus the pools of the
tenant's live announcements (the slots not created yet; created ones are live pods already)
over it is a 429 ``quota_exceeded`` with a Retry-After, as a create would get. It renders the
pool pods' template once (facade/podspec.render_pool_template: the class, the hardening, the
pool token's verifier, the announcement's expiry) and the object carries it in
``spec.podTemplate``: the controller needs neither the classes nor the facade's secret.

Idempotency as for sandboxes: with an ``Idempotency-Key`` the object's name is derived from
the tenant and the key, and the API server's AlreadyExists is the duplicate check (the same
key with a different body is a 409).

Reads go to the API server (one GET per poll; a trainer polls a handful of announcements
every second or two, not thousands of sandboxes), so any replica answers with the
controller's latest status.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from kube import AlreadyExists, KubeClient, KubeError, NotFound
from kube.cache import Obj
from kube.contract import ANNOTATION_REQUEST_DIGEST, LABEL_OWNER, LABEL_TENANT
from kube.preparation_contract import IMAGE_PREPARATIONS
from kube.times import format_time, parse_time
from sandman.wire.errors import Reason
from sandman.wire.image_preparation import (
    PoolProgress,
    Preparation,
    PreparationSpec,
    PreparationStatus,
    PreparedImage,
    PrepareImages,
    duplicate_image,
)

from .errors import FacadeError, from_kube_error
from .fairness import check_class, check_image
from .index import SandboxIndex
from .podspec import DaemonDelivery, SandboxClass, render_pool_template
from .tenancy import Tenant
from .tokens import TokenMinter

__all__ = ["PoolTemplates", "PreparationService", "eta_s", "preparation_view"]

_PREFIX = "prep-"


@dataclass(frozen=True, slots=True)
class PoolTemplates:
    """What rendering an announcement's pool template takes: the classes offered, the
    daemon's delivery, the token minter (the pool token), and the watch cache (the quota's
    live sandboxes and created pool pods)."""

    classes: Mapping[str, SandboxClass]
    delivery: DaemonDelivery
    minter: TokenMinter
    index: SandboxIndex


class PreparationService:
    """Creates and reads a tenant's ``ImagePreparation`` objects; ``pools``: announced
    sandboxes are accepted (None: an announcement with ``sandboxes`` is refused)."""

    def __init__(self, client: KubeClient, pools: PoolTemplates | None = None) -> None:
        self.client = client
        self.pools = pools
        self._locks: dict[str, asyncio.Lock] = {}

    async def create(
        self, tenant: Tenant, body: PrepareImages, key: str | None
    ) -> tuple[Preparation, bool]:
        """The announcement and whether this call created it (False: an idempotent replay)."""
        _validate(body)
        for item in body.images:
            check_image(tenant, item.image)
        _check_size(tenant, body)
        sandbox_class = self._pool_class(tenant, body)
        name = _name(tenant, key)
        now = datetime.now(UTC)
        obj = _render(tenant, body, name, now)
        if sandbox_class is not None:
            obj["spec"]["podTemplate"] = self._template(tenant, body, sandbox_class, name, now)
        ns = tenant.namespace
        try:
            async with self._locks.setdefault(tenant.name, asyncio.Lock()):
                await self._admit(tenant, body, name, now)
                created = await self.client.create(IMAGE_PREPARATIONS, obj, ns)
        except AlreadyExists:
            existing = await self._read(ns, name)
            _check_digest(existing, obj["metadata"]["annotations"][ANNOTATION_REQUEST_DIGEST])
            return preparation_view(existing, datetime.now(UTC)), False
        except KubeError as e:
            raise from_kube_error(e, "creating the preparation") from e
        return preparation_view(created, datetime.now(UTC)), True

    async def _admit(self, tenant: Tenant, body: PrepareImages, name: str, now: datetime) -> None:
        """429 ``prepare_quota_exceeded`` when this announcement would take the tenant's
        live ones over a cap (a replay of an existing one is not checked again)."""
        try:
            listed = await self.client.list(
                IMAGE_PREPARATIONS, tenant.namespace, label_selector=f"{LABEL_TENANT}={tenant.name}"
            )
        except KubeError as e:
            raise from_kube_error(e, "listing the tenant's preparations") from e
        images = {i.image for i in body.images}
        sandboxes = sum(i.count for i in body.images)
        pooled = sandboxes if body.sandboxes else 0  # slots not created yet, this one's all
        for obj in listed.get("items") or ():
            if obj["metadata"]["name"] == name:
                return  # a replay: create answers AlreadyExists and checks the digest
            if not _live(obj, now):
                continue
            spec = obj.get("spec") or {}
            counts = [int(item.get("count", 1)) for item in spec.get("images") or ()]
            for item in spec.get("images") or ():
                images.add(str(item.get("image")))
            sandboxes += sum(counts)
            if spec.get("sandboxes") and self.pools is not None:
                created = self.pools.index.pool_pods(tenant.namespace, obj["metadata"]["name"])
                pooled += max(0, sum(counts) - created)
        over = _over(tenant, len(images), sandboxes)
        if over:
            raise FacadeError(
                f"with this announcement the tenant's live ones would have {over}; "
                "it fits once announcements expire or their owner is released",
                reason=Reason.PREPARE_QUOTA_EXCEEDED,
                retry_after_s=30.0,
            )
        if body.sandboxes and self.pools is not None:
            live = self.pools.index.live(tenant.namespace)
            if live + pooled > tenant.max_sandboxes:
                raise FacadeError(
                    f"{live} live sandboxes + {pooled} announced and not created yet exceeds "
                    f"the limit of {tenant.max_sandboxes}",
                    reason=Reason.QUOTA_EXCEEDED,
                    retry_after_s=1.0,
                )

    def _pool_class(self, tenant: Tenant, body: PrepareImages) -> SandboxClass | None:
        """The announced sandboxes' class (None without ``sandboxes``), checked as a create
        checks it, and their number against the tenant's live-sandbox limit."""
        if not body.sandboxes:
            return None
        if self.pools is None:
            raise FacadeError(
                "this facade does not create announced sandboxes",
                reason=Reason.INVALID_REQUEST,
            )
        check_class(tenant, body.sandbox_class)
        sandbox_class = self.pools.classes.get(body.sandbox_class)
        if sandbox_class is None:
            known = ", ".join(sorted(self.pools.classes))
            raise FacadeError(
                f"no sandbox class {body.sandbox_class!r} (known: {known})",
                reason=Reason.UNKNOWN_CLASS,
            )
        total = sum(i.count for i in body.images)
        if total > tenant.max_sandboxes:
            raise FacadeError(
                f"this announcement alone asks for {total} sandboxes, over the tenant's limit "
                f"of {tenant.max_sandboxes} live sandboxes",
                reason=Reason.PREPARE_TOO_LARGE,
            )
        return sandbox_class

    def _template(
        self,
        tenant: Tenant,
        body: PrepareImages,
        sandbox_class: SandboxClass,
        name: str,
        now: datetime,
    ) -> Obj:
        assert self.pools is not None
        return render_pool_template(
            body.images[0].image,
            sandbox_class,
            self.pools.delivery,
            announcement=name,
            namespace=tenant.namespace,
            tenant=tenant.name,
            pool_token=self.pools.minter.pool_token_for(tenant.namespace, name),
            expires_at=now + timedelta(seconds=body.ttl_s),
        )

    async def release_owner(self, tenant: Tenant, owner: str) -> int:
        """Delete the owner's announcements (one deletecollection); how many went."""
        try:
            result = await self.client.delete_collection(
                IMAGE_PREPARATIONS, tenant.namespace, label_selector=f"{LABEL_OWNER}={owner}"
            )
        except NotFound:
            return 0  # the CRD is not installed: nothing was announced
        except KubeError as e:
            raise from_kube_error(e, "deleting the owner's preparations") from e
        return len((result or {}).get("items") or ())

    async def get(self, tenant: Tenant, pid: str) -> Preparation:
        if not pid.startswith(_PREFIX):
            raise _not_found(pid)
        return preparation_view(await self._read(tenant.namespace, pid), datetime.now(UTC))

    async def _read(self, ns: str, name: str) -> Obj:
        try:
            obj: Obj = await self.client.get(IMAGE_PREPARATIONS, name, ns)
        except NotFound as e:
            raise _not_found(name) from e
        except KubeError as e:
            raise from_kube_error(e, "reading the preparation") from e
        return obj


def _validate(body: PrepareImages) -> None:
    dup = duplicate_image(body.images)
    if dup is not None:
        raise FacadeError(
            f"image {dup[1]!r} is named twice (at images[{dup[0]}])",
            reason=Reason.DUPLICATE_IMAGE,
        )


def _check_size(tenant: Tenant, body: PrepareImages) -> None:
    over = _over(tenant, len(body.images), sum(i.count for i in body.images))
    if over:
        raise FacadeError(f"this announcement alone has {over}", reason=Reason.PREPARE_TOO_LARGE)


def _over(tenant: Tenant, images: int, sandboxes: int) -> str:
    """What passes the tenant's caps, in words ("" when nothing does)."""
    if images > tenant.max_prepared_images:
        return f"{images} images, over the limit of {tenant.max_prepared_images}"
    if sandboxes > tenant.max_prepared_sandboxes:
        return f"{sandboxes} expected sandboxes, over the limit of {tenant.max_prepared_sandboxes}"
    return ""


def _live(obj: Obj, now: datetime) -> bool:
    expires = parse_time((obj.get("spec") or {}).get("expiresAt"))
    return expires is None or expires > now


def _name(tenant: Tenant, key: str | None) -> str:
    if not key:
        return f"{_PREFIX}{secrets.token_hex(10)}"
    material = f"{tenant.name}\0prepare\0{key}"
    return f"{_PREFIX}{hashlib.sha256(material.encode()).hexdigest()[:20]}"


def _digest(body: PrepareImages) -> str:
    return hashlib.sha256(msgspec.json.encode(body, order="sorted")).hexdigest()[:32]


def _render(tenant: Tenant, body: PrepareImages, name: str, now: datetime) -> Obj:
    spec = PreparationSpec(
        images=body.images,
        deadline=body.deadline,
        expires_at=now + timedelta(seconds=body.ttl_s),
        sandboxes=body.sandboxes,
        sandbox_class=body.sandbox_class if body.sandboxes else None,
    )
    labels = {LABEL_TENANT: tenant.name}
    if body.owner:
        labels[LABEL_OWNER] = body.owner
    return {
        "apiVersion": IMAGE_PREPARATIONS.api_version,
        "kind": IMAGE_PREPARATIONS.kind,
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {ANNOTATION_REQUEST_DIGEST: _digest(body)},
        },
        "spec": msgspec.to_builtins(spec),
    }


def _check_digest(obj: Obj, digest: str) -> None:
    found = (obj["metadata"].get("annotations") or {}).get(ANNOTATION_REQUEST_DIGEST)
    if found is not None and found != digest:
        raise FacadeError(
            "this Idempotency-Key was used for a different announcement; use a new key",
            reason=Reason.IDEMPOTENCY_KEY_REUSED,
        )


def _not_found(pid: str) -> FacadeError:
    return FacadeError(f"no preparation {pid!r}", reason=Reason.PREPARATION_NOT_FOUND)


def _status(raw: Any) -> PreparationStatus:
    try:
        return msgspec.convert(raw or {}, PreparationStatus)
    except msgspec.ValidationError:
        # A status this facade cannot read (a newer controller): report it as pending.
        return PreparationStatus()


def preparation_view(obj: Obj, now: datetime) -> Preparation:
    """The object as the trainer sees it: the controller's status, the sums and an ETA."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    status = _status(obj.get("status"))
    created = parse_time(meta.get("creationTimestamp"))
    expected = sum(int(i.get("count", 1)) for i in spec.get("images") or ())
    return Preparation(
        id=meta["name"],
        phase=status.phase,
        images=[
            PreparedImage(
                image=i.image,
                count=i.count,
                nodes_wanted=i.nodes_wanted,
                nodes_planned=i.nodes_planned,
                nodes_ready=i.nodes_ready,
                sandboxes_ready=i.sandboxes_ready,
                failures=i.failures,
            )
            for i in status.images
        ],
        reason=status.reason or None,
        message=status.message or None,
        eta_s=eta_s(status, created, now),
        sandboxes_ready=sum(i.sandboxes_ready for i in status.images),
        sandboxes_expected=expected,
        deadline=spec.get("deadline"),
        created_at=meta.get("creationTimestamp"),
        ready_at=_format_time(status.ready_at),
        expires_at=spec.get("expiresAt"),
        sandboxes=bool(spec.get("sandboxes")),
        sandbox_class=spec.get("class") if spec.get("sandboxes") else None,
        pool=_pool(status, expected) if spec.get("sandboxes") else None,
    )


def _pool(status: PreparationStatus, expected: int) -> PoolProgress:
    """The pool's counts as the controller last wrote them (wanted: the counts, before it
    has written any)."""
    return status.pool if status.pool is not None else PoolProgress(wanted=expected)


def eta_s(status: PreparationStatus, created: datetime | None, now: datetime) -> float | None:
    """Seconds until every image has its nodes, extrapolated linearly from the fraction of
    wanted nodes ready so far over the time since the request was created."""
    if status.phase == "Ready":
        return 0.0
    if status.phase in ("Invalid", "Expired") or created is None:
        return None
    wanted = sum(i.nodes_wanted for i in status.images)
    ready = sum(min(i.nodes_ready, i.nodes_wanted) for i in status.images)
    if wanted <= 0 or ready <= 0:
        return None
    elapsed = max((now - created).total_seconds(), 0.0)
    fraction = ready / wanted
    return round(elapsed * (1.0 - fraction) / fraction, 1)


def _format_time(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)
