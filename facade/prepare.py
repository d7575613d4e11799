"""Trainer-announced preparation: ``POST /v1/prepare`` and ``GET /v1/prepare/{id}``.

A trainer that knows step t+1's tasks while step t's rollouts run announces their images
(with the number of sandboxes expected for each); the pulls then overlap the rollouts instead
of delaying the next burst. The facade does not decide anything here: an announcement is one
``ImagePreparation`` object in the tenant's namespace — the very object the controller
already acts on for an operator's standing requests (controller/prepare.py) — and its
progress is that object's ``status``, rendered for the trainer with an ETA.

Why per tenant: the object lives in the tenant's namespace, so one tenant can neither read
nor release another's announcement (a ``GET`` of another tenant's id is a 404), and the
tenant's RBAC and quotas in the cluster apply to it as to its pods. The announcement counts
for ``ttl_s`` (``expiresAt`` on the object; the controller then releases its images), so a
trainer that crashes does not pin images on disks forever.

Idempotency as for sandboxes: with an ``Idempotency-Key`` the object's name is derived from
the tenant and the key, and the API server's AlreadyExists is the duplicate check (the same
key with a different body is a 409).

Reads go to the API server (one GET per poll; a trainer polls a handful of announcements
every second or two, not thousands of sandboxes), so any replica answers with the
controller's latest status.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from kube import AlreadyExists, KubeClient, KubeError, NotFound
from kube.cache import Obj
from kube.contract import ANNOTATION_REQUEST_DIGEST, LABEL_OWNER, LABEL_TENANT
from kube.preparation import IMAGE_PREPARATIONS
from sandman.wire.prepare import (
    Preparation,
    PreparationSpec,
    PreparationStatus,
    PreparedImage,
    PrepareImages,
    duplicate_image,
)

from .errors import FacadeError, from_kube_error
from .tenancy import Tenant

__all__ = ["PreparationService", "eta_s", "preparation_view"]

_PREFIX = "prep-"


class PreparationService:
    """Creates and reads a tenant's ``ImagePreparation`` objects."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def create(
        self, tenant: Tenant, body: PrepareImages, key: str | None
    ) -> tuple[Preparation, bool]:
        """The announcement and whether this call created it (False: an idempotent replay)."""
        _validate(body)
        name = _name(tenant, key)
        obj = _render(tenant, body, name, datetime.now(UTC))
        ns = tenant.namespace
        try:
            created = await self.client.create(IMAGE_PREPARATIONS, obj, ns)
        except AlreadyExists:
            existing = await self._read(ns, name)
            _check_digest(existing, obj["metadata"]["annotations"][ANNOTATION_REQUEST_DIGEST])
            return preparation_view(existing, datetime.now(UTC)), False
        except KubeError as e:
            raise from_kube_error(e, "creating the preparation") from e
        return preparation_view(created, datetime.now(UTC)), True

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
            400, "duplicate_image", f"image {dup[1]!r} is named twice (at images[{dup[0]}])"
        )


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
            409,
            "idempotency_key_reused",
            "this Idempotency-Key was used for a different announcement; use a new key",
        )


def _not_found(pid: str) -> FacadeError:
    return FacadeError(404, "preparation_not_found", f"no preparation {pid!r}")


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
    created = _parse_time(meta.get("creationTimestamp"))
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
    )


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


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _format_time(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
