"""Idempotency without a database: the pod names a create gets, and the digest it carries.

A create with an ``Idempotency-Key`` gets a pod name derived from the tenant and the key
(member ``i`` of a batch: from the key and ``i``), so a retried request can only ever hit the
same pods: the API server's AlreadyExists *is* the duplicate check, across facade replicas
and restarts. The pod carries a digest of the request (``sandman.io/request-digest``); the
same key with a different request is a 409 ``idempotency_key_reused``, not a silent reuse.
A batch's digest covers its count too, so a key reused with another count meets the first
member's digest (facade/create.py creates that member alone) and is refused whole.

Why a module of its own: both ends of a create ask it — the create path before anything is
written (a replay found in the watch cache) and the pod writer after an AlreadyExists (a
replay the cache has not seen yet) — and neither may import the other.
"""

from __future__ import annotations

import hashlib
import secrets

import msgspec

from kube.cache import Obj
from kube.contract import ANNOTATION_REQUEST_DIGEST
from sandman.wire.errors import Reason
from sandman.wire.facade import CreateBatch, CreateSandbox

from .errors import FacadeError
from .tenancy import Tenant

__all__ = ["request_digest", "reused_key", "sandbox_id"]


def sandbox_id(tenant: Tenant, key: str | None, member: int | None = None) -> str:
    """The pod name: derived from the tenant and the key (and the member index in a batch),
    or random without a key."""
    if not key:
        return f"sb-{secrets.token_hex(10)}"
    material = f"{tenant.name}\0{key}" if member is None else f"{tenant.name}\0{key}\0{member}"
    return f"sb-{hashlib.sha256(material.encode()).hexdigest()[:20]}"


def request_digest(request: CreateSandbox | CreateBatch) -> str:
    """What a key was used for: the request's fields, encoded in a stable order."""
    return hashlib.sha256(msgspec.json.encode(request, order="sorted")).hexdigest()[:32]


def reused_key(pod: Obj, digest: str) -> FacadeError | None:
    """The 409 if ``pod`` was created for another request than ``digest``'s, else None."""
    found = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_REQUEST_DIGEST)
    if found is None or found == digest:
        return None
    return FacadeError(
        "this Idempotency-Key was used for a different request; use a new key",
        reason=Reason.IDEMPOTENCY_KEY_REUSED,
    )
