"""The facade's wire models: one request and one response type per operation.

msgspec Structs, so a request body is decoded *and* validated in one pass (types, required
fields, constraints) and a bad body becomes a 400 with the offending field named, never a
KeyError deep in a handler. The same classes generate the OpenAPI document
(``docs/openapi/facade.json``) and are what the SDK decodes, so server, document and client
share one definition of the contract.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

__all__ = [
    "DEFAULT_CLASS",
    "DEFAULT_TTL_S",
    "MAX_BATCH",
    "BatchFailure",
    "BatchResult",
    "ClassInfo",
    "ClassList",
    "CreateBatch",
    "CreateSandbox",
    "LeaseRenewal",
    "LeaseStatus",
    "OwnerReleased",
    "Sandbox",
    "SandboxList",
    "SandboxState",
]

MAX_BATCH = 5000
#: What a create gets when it names no class / no TTL: the one definition of both defaults.
#: ``CreateSandbox`` declares them; the SDK's ``create``/``create_many`` signatures, the
#: ``sandman create`` options, the facade's pod request and its fallback class list use
#: these names, never the values (tests/test_create_spec.py holds each side to it).
DEFAULT_CLASS: Final = "tiny"
DEFAULT_TTL_S: Final = 3600

SandboxState = Literal["pending", "starting", "ready", "failed", "terminated", "releasing"]
"""``pending``: not on a node yet; ``starting``: bound, daemon not ready; ``ready``: tool calls
are served; ``failed``: never became usable (reason says why); ``terminated``: it was usable
and is not any more (its files and processes are gone); ``releasing``: being deleted."""

Seconds = Annotated[int, msgspec.Meta(ge=1, le=7 * 24 * 3600)]
#: A group's name: a DNS label (it is written into the pods' annotations).
GroupName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]
OwnerName = Annotated[str, msgspec.Meta(min_length=1, max_length=63)]


# The create spec, one type for both sides: the SDK builds it, the facade decodes it and
# renders the pod from its fields, every value passed on. (A comment, not the docstring:
# the docstring is the OpenAPI document's description of the request.)
class CreateSandbox(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One sandbox: an unmodified task image plus Sandman's daemon."""

    image: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    owner: OwnerName
    sandbox_class: str = msgspec.field(default=DEFAULT_CLASS, name="class")
    ttl_s: Seconds = DEFAULT_TTL_S
    idle_timeout_s: Seconds | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class CreateBatch(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``count`` sandboxes from one spec, in one request (bursts need it).

    With ``group`` (e.g. one GRPO task's G rollouts) the sandboxes are placed all or
    nothing, on as few nodes as fit: one pull of the image per group instead of one per
    sandbox, and no step waiting on a half-placed group. Name each group once per step."""

    spec: CreateSandbox
    count: Annotated[int, msgspec.Meta(ge=1, le=MAX_BATCH)]
    group: GroupName | None = None


class Sandbox(msgspec.Struct, kw_only=True):
    id: str
    owner: str
    sandbox_class: str = msgspec.field(name="class")
    image: str
    state: SandboxState
    #: Machine-readable cause when not simply progressing, e.g. ``unschedulable``.
    reason: str | None = None
    message: str | None = None
    node: str | None = None
    #: 0 for the first pod; n after n transparent replacements (kubelet admission).
    attempt: int = 0
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    created_at: str | None = None
    ready_at: str | None = None
    expires_at: str | None = None


class SandboxList(msgspec.Struct, kw_only=True):
    items: list[Sandbox]
    #: Pass as ``continue`` to get the next page; null on the last page.
    next: str | None = msgspec.field(default=None, name="continue")


class BatchFailure(msgspec.Struct, kw_only=True):
    index: int
    reason: str
    message: str
    #: The HTTP status this member would have had alone (429: retry after ``retry_after_s``).
    status: int = 500
    retry_after_s: float | None = None


class BatchResult(msgspec.Struct, kw_only=True):
    sandboxes: list[Sandbox]
    #: Members not created; retry the same request with the same Idempotency-Key.
    failed: list[BatchFailure] = msgspec.field(default_factory=list)


class OwnerReleased(msgspec.Struct, kw_only=True):
    owner: str
    released: int


class LeaseRenewal(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    duration_s: Annotated[int, msgspec.Meta(ge=5, le=3600)] = 60


class LeaseStatus(msgspec.Struct, kw_only=True):
    owner: str
    duration_s: int
    renewed_at: str


class ClassInfo(msgspec.Struct, kw_only=True):
    name: str
    cpu: str
    memory: str
    runtime_class: str | None = None


class ClassList(msgspec.Struct, kw_only=True):
    items: list[ClassInfo]
