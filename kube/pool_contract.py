"""The pool contract: announced sandboxes created ahead of a step, claimed at create time.

Why one module: three processes meet on these names — the controller creates pool pods and
serves claims, the facade claims them for a create and shows them as the claim's sandboxes,
and the collector deletes what a claim no longer holds. docs/controller.md ("Pools")
explains the choices; this module holds them.

**Pool pods** are sandbox pods (the sandbox contract, kube/contract.py) with the label
:data:`LABEL_POOL` = the announcement's name, and deterministic names per announcement slot
(:func:`pool_pod_name`): a controller that restarts, or misses watch events, mid-fill
re-creates a slot at most once — the API server answers AlreadyExists for a slot that is
there — so the pool never over-creates.

**The claim** is one ``SandboxClaim`` object (:data:`SANDBOX_CLAIMS`, namespaced,
``sandman.io/v1alpha1``) per claimed batch, whatever its size: its ``spec`` (:class:`ClaimSpec`)
names the pods it holds and carries what a create's request sets at claim time (owner,
labels, expiry, idle timeout, the request's digest). One create per batch, so a batch of
5,000 claimed pool pods costs one API write, not 5,000. Its name comes from the facade's
Idempotency-Key (:func:`claim_name`): a retried create finds the object and gets the same
pods back. A pod named by a claim is never handed out again, and nothing released ever goes
back to a pool (a released pod is deleted; its slot is not refilled).

**The claims endpoint** of the leading controller (:data:`CLAIMS_PATH`, beside the
placements of kube/placement.py and found the same way: the URL on the election Lease):
:class:`ClaimsRequest` in, :class:`ClaimsAnswer` out.

The CustomResourceDefinition is the manifest ``manifests/crds/sandboxclaims.yaml``, held
to these names and models by tests/kube/test_pool_contract.py.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any, Final

import msgspec

from kube.contract import LABEL_SANDBOX
from kube.preparation_contract import GROUP, VERSION
from kube.resources import Resource

__all__ = [
    "CLAIMS_PATH",
    "LABEL_POOL",
    "LABEL_STANDING",
    "MAX_CLAIM",
    "SANDBOX_CLAIMS",
    "ClaimSpec",
    "ClaimsAnswer",
    "ClaimsRequest",
    "claim_name",
    "pool_pod",
    "pool_pod_name",
    "pool_slot",
]

SANDBOX_CLAIMS = Resource(GROUP, VERSION, "sandboxclaims", "SandboxClaim")

#: On a pool pod: the announcement (``ImagePreparation``) it was created for.
LABEL_POOL: Final = "sandman.io/pool"
#: On a standing pool's ImagePreparation and its pods (value "true"): a pool from the
#: tenant's configuration (facade/standing.py), kept at its ``min`` and never expiring;
#: claims hand its pods out after the announced ones (docs/controller.md, "Standing pools").
LABEL_STANDING: Final = "sandman.io/standing"
CLAIMS_PATH: Final = "/internal/v1/claims"
#: One claim holds at most this many pods (a batch's largest size, with room): the claim's
#: object stays far below etcd's 1.5 MiB (5,000 names of ~40 bytes: ~200 KiB).
MAX_CLAIM: Final = 5_000

_NAME_OK = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def pool_pod_name(announcement: str, image_index: int, slot: int) -> str:
    """The pod of slot ``slot`` of the announcement's ``image_index``-th image: the same
    name every time it is computed, a valid DNS label (at most 63 characters)."""
    suffix = f"-p{image_index}-{slot}"
    base = announcement if _NAME_OK.fullmatch(announcement) else ""
    if not base or len(base) + len(suffix) > 63:
        digest = hashlib.sha256(announcement.encode()).hexdigest()[:12]
        head = re.sub(r"[^a-z0-9-]", "", announcement.lower())[: 63 - len(suffix) - 13]
        base = f"{head.strip('-')}-{digest}".strip("-")
    return base + suffix


_SLOT = re.compile(r"-p([0-9]+)-([0-9]+)")


def pool_slot(announcement: str, name: str) -> tuple[int, int] | None:
    """(image index, slot) of the announcement's pool pod ``name``; None for a name
    :func:`pool_pod_name` does not give it."""
    found = _SLOT.search(name)
    if found is None or found.end() != len(name):
        return None
    image_index, slot = int(found[1]), int(found[2])
    return (image_index, slot) if pool_pod_name(announcement, image_index, slot) == name else None


def pool_pod(
    template: dict[str, Any], announcement: str, image_index: int, image: str, slot: int
) -> dict[str, Any]:
    """The pool pod of one slot, from the announcement's pod template (the facade renders it
    once per announcement, facade/podspec.render_pool_template, and the ImagePreparation
    carries it): the template with the slot's name (also its sandbox label) and the image.
    Everything else — class, hardening, the pool token, the announcement's expiry — is the
    template's, so every slot of an announcement is the same pod but for these three."""
    pod = copy.deepcopy(template)
    name = pool_pod_name(announcement, image_index, slot)
    meta = pod.setdefault("metadata", {})
    meta["name"] = name
    meta.setdefault("labels", {})[LABEL_SANDBOX] = name
    meta["labels"][LABEL_POOL] = announcement
    (container,) = [c for c in pod["spec"]["containers"] if c.get("name") == "sandbox"]
    container["image"] = image
    return pod


def claim_name(idempotency_key: str) -> str:
    """The SandboxClaim of the create sent with ``idempotency_key`` (keys are per tenant,
    and a claim lives in the tenant's namespace)."""
    return "claim-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


class ClaimSpec(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """A SandboxClaim's ``spec``: the pods of one claimed batch and what the create set."""

    pool: str
    image: str
    sandbox_class: str = msgspec.field(name="class")
    pods: list[str]
    request_digest: str
    owner: str | None = None
    labels: dict[str, str] = {}
    #: RFC 3339; the collector deletes the claim's pods after it.
    expires_at: str | None = None
    idle_timeout_s: float | None = msgspec.field(default=None, name="idleTimeoutSeconds")


class ClaimsRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Up to ``count`` Ready, unclaimed pool pods of (namespace, image, class), recorded in
    one SandboxClaim named ``claim`` with the request's settings."""

    namespace: str
    image: str
    sandbox_class: str = msgspec.field(name="class")
    count: int
    claim: str
    request_digest: str
    owner: str | None = None
    labels: dict[str, str] = {}
    expires_at: str | None = None
    idle_timeout_s: float | None = None
    #: Answer the claim ``claim`` if it exists, and claim nothing new: a retried create
    #: some of whose members exist already (cold) may only get the first request's pods
    #: back — new ones would be sandboxes no member of the request is.
    replay_only: bool = False


class ClaimsAnswer(msgspec.Struct, kw_only=True):
    """The claimed pods (possibly fewer than asked, possibly none); ``replayed``: the claim
    existed already (a retry), its pods are the first request's."""

    pods: list[str]
    replayed: bool = False
