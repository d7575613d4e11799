"""Image preparation: what a request asks for and what its progress looks like.

One definition for every side: the ``ImagePreparation`` custom resource's ``spec`` and
``status`` are these Structs encoded as JSON (camelCase, as Kubernetes objects are); the
controller decodes a request's spec with :class:`PreparationSpec` (validation included: a
bad request gets ``status.phase: Invalid`` with the offending field named, never a crash)
and writes :class:`PreparationStatus`. The facade's ``POST /v1/prepare`` decodes
:class:`PrepareImages` (the same :class:`ImageRequest` items, plus a lifetime) and answers
``POST`` and ``GET /v1/prepare/{id}`` with :class:`Preparation` (the status as the trainer
sees it, with an ETA); the SDK builds and decodes the same two classes.

Why "count" per image: the controller turns the number of sandboxes a trainer expects into
the number of nodes that must hold the image (enough that the count fits under the per-node
start-queue cap, docs/node-agent.md), not into one pull per sandbox.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal

import msgspec

from .patterns import ImageRef, OwnerName

__all__ = [
    "DEFAULT_PREPARE_TTL_S",
    "MAX_IMAGES",
    "ImageFailure",
    "ImageProgress",
    "ImageRequest",
    "Preparation",
    "PreparationPhase",
    "PreparationSpec",
    "PreparationStatus",
    "PrepareImages",
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


class PreparationStatus(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """What the leading controller writes to ``status`` (at most once per few seconds)."""

    phase: PreparationPhase = "Pending"
    reason: str = ""
    message: str = ""
    observed_generation: int = 0
    images: list[ImageProgress] = msgspec.field(default_factory=list)
    #: When every image first had all the nodes it wanted.
    ready_at: datetime | None = None
    updated_at: datetime | None = None


class PrepareImages(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Announce images ahead of a burst: each with the number of sandboxes expected from it.

    ``deadline``: when the sandboxes are expected (earlier deadlines are prepared first);
    ``ttl_s``: how long the announcement counts (then its images may be released);
    ``owner``: the run it belongs to (listed on the object, for the operator)."""

    images: Annotated[list[ImageRequest], msgspec.Meta(min_length=1, max_length=MAX_IMAGES)]
    deadline: Annotated[datetime, msgspec.Meta(tz=True)] | None = None
    ttl_s: Annotated[int, msgspec.Meta(ge=60, le=7 * 24 * 3600)] = DEFAULT_PREPARE_TTL_S
    owner: OwnerName | None = None


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
    return spec
