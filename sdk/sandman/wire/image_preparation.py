"""Image preparation: what a request asks for and what its progress looks like.

One definition for every side: the ``ImagePreparation`` custom resource's ``spec`` and
``status`` are these Structs encoded as JSON (camelCase, as Kubernetes objects are); the
controller decodes a request's spec with :class:`PreparationSpec` (validation included: a
bad request gets ``status.phase: Invalid`` with the offending field named, never a crash)
and writes :class:`PreparationStatus`. The facade's ``POST /v1/prepare`` decodes
:class:`PrepareImages` (the same :class:`ImageRequest` items, plus a lifetime) and answers
``POST`` and ``GET /v1/prepare/{id}`` with :class:`Preparation` (the status as the trainer
sees it, with an ETA); the SDK builds and decodes the same two classes.

Announced sandboxes: with ``sandboxes`` set, the announcement asks for the sandboxes
themselves, not only their images: ``count`` pristine sandboxes of ``class`` per image,
created by the leading controller ahead of the deadline (its pool filler,
controller/pools.py) and handed to the creates that ask for that image and class. The
facade renders the pool pods' template once per announcement (``podTemplate`` on the
spec: the controller creates every slot's pod from it, kube/pool_contract.pool_pod); the
controller reports the pool's counts in ``status.pool`` (:class:`PoolProgress`).

Standing pools (``standing`` on the spec, :class:`StandingPool`): an operator's
long-lived pool of one (image, class) from the tenant's configuration, written by the
facade and never expiring: the filler keeps ``min`` unclaimed pool sandboxes and at most
``max`` of the pool's pods alive (claimed ones included), refilling as claims drain it,
under slot numbers that only grow (``status.nextSlot``: a claimed slot is never
re-used).

Why "count" per image: the controller turns the number of sandboxes a trainer expects into
the number of nodes that must hold the image (enough that the count fits under the per-node
start-queue cap, docs/node-agent.md), not into one pull per sandbox.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

import msgspec

from .facade import DEFAULT_CLASS
from .patterns import ImageRef, OwnerName

__all__ = [
    "DEFAULT_PREPARE_TTL_S",
    "MAX_IMAGES",
    "ImageFailure",
    "ImageProgress",
    "ImageRequest",
    "PoolProgress",
    "Preparation",
    "PreparationPhase",
    "PreparationSpec",
    "PreparationStatus",
    "PrepareImages",
    "StandingPool",
    "decode_spec",
    "duplicate_image",
]

#: Most images one request may name (a step of a SWE-style dataset is hundreds).
MAX_IMAGES: Final = 2000
#: Most sandboxes expected for one image (a whole burst of one task).
MAX_COUNT: Final = 100_000
#: How long a trainer's announcement counts when it says nothing (``PrepareImages.ttl_s``;
#: the SDK's and the CLI's defaults are this name).
DEFAULT_PREPARE_TTL_S: Final = 3600


PreparationPhase = Literal["Pending", "Preparing", "Ready", "Invalid", "Expired"]
"""``Pending``: seen, no node pulling yet; ``Preparing``: pulls under way; ``Ready``: every
image is on the nodes it needs; ``Invalid``: the spec does not decode (``reason`` says
where); ``Expired``: past ``expiresAt``, no longer counted (its images are released)."""


class ImageRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One image and the number of sandboxes expected to start from it."""

    image: ImageRef
    count: Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)] = 1


class StandingPool(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A standing pool's sizes: ``min`` unclaimed pool sandboxes kept (Ready or starting),
    at most ``max`` of its pods alive at once (claimed ones included), none created while the
    tenant's namespace has ``tenantLimit`` live sandboxes or more (its ``max_sandboxes``)."""

    min: Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
    max: Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)]
    tenant_limit: Annotated[int, msgspec.Meta(ge=1)] = msgspec.field(
        default=MAX_COUNT, name="tenantLimit"
    )

    def __post_init__(self) -> None:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is over max {self.max}")


class PreparationSpec(
    msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True, rename="camel"
):
    """Prepare these images, this many sandboxes expected for each.

    ``deadline``: when the sandboxes are expected (earlier deadlines are prepared first);
    ``expires_at``: when the request stops counting (absent: until the object is deleted).
    """

    images: Annotated[list[ImageRequest], msgspec.Meta(min_length=1, max_length=MAX_IMAGES)]
    deadline: datetime | None = None
    expires_at: datetime | None = None
    #: Create ``count`` pool sandboxes per image too (the pool filler, controller/pools.py).
    sandboxes: bool = False
    #: The pool sandboxes' class (with ``sandboxes``).
    sandbox_class: str | None = msgspec.field(default=None, name="class")
    #: The pool pods' template, rendered by the facade (facade/podspec.render_pool_template);
    #: kube/pool_contract.pool_pod makes each slot's pod of it.
    pod_template: dict[str, Any] | None = None
    #: A standing pool (with ``sandboxes``, one image): kept at ``min``, never expires.
    standing: StandingPool | None = None


class ImageFailure(msgspec.Struct, kw_only=True, frozen=True, rename="camel"):
    """The last failed pull of the image on one node (the agent retries with backoff)."""

    node: str
    reason: str
    message: str = ""


class ImageProgress(msgspec.Struct, kw_only=True, frozen=True, rename="camel"):
    """One image of a request: how many nodes it needs, has planned and has ready."""

    image: str
    count: int
    nodes_wanted: int
    nodes_planned: int = 0
    nodes_ready: int = 0
    #: Sandboxes of this image that can start at once on ready nodes without queueing
    #: (ready nodes x the start-queue cap, at most ``count``).
    sandboxes_ready: int = 0
    failures: list[ImageFailure] = msgspec.field(default_factory=list)


class PoolProgress(msgspec.Struct, kw_only=True, rename="camel"):
    """An announcement's pool sandboxes, summed over its images: ``wanted`` (the counts),
    ``created`` (pool pods that exist, claimed or not), ``ready`` (Ready and unclaimed: what
    a create can be handed now), ``claimed`` (handed to a create; never refilled)."""

    wanted: int = 0
    created: int = 0
    ready: int = 0
    claimed: int = 0


class PreparationStatus(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """What the leading controller writes to ``status`` (at most once per few seconds).

    ``pool`` is the pool filler's (controller/pools.py), patched on its own: the image
    preparer's merge patches never name it, so neither writer overwrites the other."""

    phase: PreparationPhase = "Pending"
    reason: str = ""
    message: str = ""
    observed_generation: int = 0
    images: list[ImageProgress] = msgspec.field(default_factory=list)
    #: When every image first had all the nodes it wanted.
    ready_at: datetime | None = None
    updated_at: datetime | None = None
    pool: PoolProgress | None = None
    #: A standing pool's next slot number (the pool filler's, patched on its own before it
    #: creates the slots below it): every slot below it was used once, never created again.
    next_slot: int = 0


class PrepareImages(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Announce images ahead of a burst: each with the number of sandboxes expected from it.

    ``deadline``: when the sandboxes are expected (earlier deadlines are prepared first);
    ``ttl_s``: how long the announcement counts (then its images may be released);
    ``owner``: the run it belongs to (listed on the object, for the operator);
    ``sandboxes``: create the sandboxes too, ``count`` per image of ``class``, kept until a
    create claims them or the announcement ends (they count against the tenant's
    ``max_sandboxes`` as live sandboxes do)."""

    images: Annotated[list[ImageRequest], msgspec.Meta(min_length=1, max_length=MAX_IMAGES)]
    deadline: Annotated[datetime, msgspec.Meta(tz=True)] | None = None
    ttl_s: Annotated[int, msgspec.Meta(ge=60, le=7 * 24 * 3600)] = DEFAULT_PREPARE_TTL_S
    owner: OwnerName | None = None
    sandboxes: Annotated[
        bool, msgspec.Meta(description="create the sandboxes ahead too, not only the images")
    ] = False
    sandbox_class: Annotated[
        str, msgspec.Meta(description="the announced sandboxes' class (GET /v1/classes)")
    ] = msgspec.field(default=DEFAULT_CLASS, name="class")


class PreparedImage(msgspec.Struct, kw_only=True):
    """One image of an announcement (the facade's snake_case spelling of :class:`ImageProgress`)."""

    image: str
    count: int
    nodes_wanted: int
    nodes_planned: int = 0
    nodes_ready: int = 0
    #: Sandboxes of this image that can start at once on ready nodes (at most ``count``).
    sandboxes_ready: int = 0
    failures: list[ImageFailure] = msgspec.field(default_factory=list)


class Preparation(msgspec.Struct, kw_only=True):
    """One announcement as the trainer sees it: per image, nodes wanted and ready (and the
    sandboxes that can start at once there), the agents' failures, and an ETA."""

    id: str
    phase: PreparationPhase
    images: list[PreparedImage]
    reason: str | None = None
    message: str | None = None
    #: Seconds until every image has its nodes, extrapolated from the progress so far
    #: (0 when Ready; null before any node is ready or when it cannot finish).
    eta_s: float | None = None
    #: Sandboxes (summed over images) that can start at once on ready nodes, and expected.
    sandboxes_ready: int = 0
    sandboxes_expected: int = 0
    deadline: str | None = None
    created_at: str | None = None
    ready_at: str | None = None
    expires_at: str | None = None
    #: With ``sandboxes``: the pool's class and counts (null until the controller reports).
    sandboxes: bool = False
    sandbox_class: str | None = msgspec.field(default=None, name="class")
    pool: PoolProgress | None = None


def duplicate_image(images: list[ImageRequest]) -> tuple[int, str] | None:
    """The index and reference of the first image named twice, if any."""
    seen: set[str] = set()
    for i, item in enumerate(images):
        if item.image in seen:
            return i, item.image
        seen.add(item.image)
    return None


def decode_spec(raw: object) -> PreparationSpec:
    """A custom resource's ``spec`` (decoded JSON) as a :class:`PreparationSpec`; raises
    ``msgspec.ValidationError`` naming the bad field. Duplicate images are refused too."""
    spec = msgspec.convert(raw, PreparationSpec)
    dup = duplicate_image(spec.images)
    if dup is not None:
        raise msgspec.ValidationError(f"duplicate image {dup[1]!r} - at `$.images[{dup[0]}]`")
    if spec.standing is not None and (not spec.sandboxes or len(spec.images) != 1):
        raise msgspec.ValidationError(
            "a standing pool has sandboxes and exactly one image - at `$.standing`"
        )
    return spec
