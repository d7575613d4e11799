"""The facade's wire models: one request and one response type per operation.

msgspec Structs, so a request body is decoded *and* validated in one pass (types, required
fields, constraints) and a bad body becomes a 400 with the offending field named, never a
KeyError deep in a handler. The same classes generate the OpenAPI document
(``docs/openapi/facade.json``) and are what the SDK decodes, so server, document and client
share one definition of the contract. That includes the query strings (``GetQuery``,
``ListQuery``, ``OwnerQuery``) and the owner in a path: every rule a request must follow is
a constraint here, so a request the document calls valid is one the server accepts.

Every pattern matches whole strings alike in Python and ECMA-262 (``sandman.wire.patterns``).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from .patterns import (
    _LABEL_NAME,
    _LABEL_VALUE,
    LABEL_NAME_PATTERN,
    LABEL_VALUE_PATTERN,
    ImageRef,
    OwnerName,
    whole,
)

__all__ = [
    "DEFAULT_CLASS",
    "DEFAULT_PAGE",
    "DEFAULT_TTL_S",
    "DEFAULT_WAIT_S",
    "LABEL_NAME_PATTERN",
    "LABEL_VALUE_PATTERN",
    "MAX_BATCH",
    "MAX_PAGE",
    "MAX_WAIT_S",
    "RESERVED_ENV_PREFIX",
    "BatchFailure",
    "BatchResult",
    "ClassInfo",
    "ClassList",
    "CreateBatch",
    "CreateSandbox",
    "GetQuery",
    "IdempotencyKey",
    "LeaseRenewal",
    "LeaseStatus",
    "ListQuery",
    "OwnerName",
    "OwnerQuery",
    "OwnerReleased",
    "Sandbox",
    "SandboxList",
    "SandboxState",
]

MAX_BATCH = 5000
#: What a create gets when it names no class / no TTL: the one definition of both defaults.
#: ``CreateSandbox`` declares them; the SDK and the ``sandman create`` flags take them from
#: the Struct (they pass on only what the caller gave), the facade's pod request and its
#: fallback class list use these names, never the values.
DEFAULT_CLASS: Final = "tiny"
DEFAULT_TTL_S: Final = 3600

#: The longest wait a ``GET ?wait=`` may ask for, and the default; the largest list page.
MAX_WAIT_S: Final = 600  # an int: msgspec renders a float bound as 600 or 600.0 by call order
DEFAULT_WAIT_S: Final = 30.0
MAX_PAGE: Final = 1000
DEFAULT_PAGE: Final = 100
#: Environment names a create may not set: the daemon reads its settings from them.
RESERVED_ENV_PREFIX: Final = "SANDMAN_"


SandboxState = Literal["pending", "starting", "ready", "failed", "terminated", "releasing"]
"""``pending``: not on a node yet; ``starting``: bound, daemon not ready; ``ready``: tool calls
are served; ``failed``: never became usable (reason says why); ``terminated``: it was usable
and is not any more (its files and processes are gone); ``releasing``: being deleted."""

Seconds = Annotated[int, msgspec.Meta(ge=1, le=7 * 24 * 3600)]
EnvName = Annotated[
    str,
    msgspec.Meta(
        pattern=whole(f"(?!{RESERVED_ENV_PREFIX})[-._a-zA-Z][-._a-zA-Z0-9]*"),
        max_length=256,
        description=f"a variable name; the `{RESERVED_ENV_PREFIX}` prefix is reserved",
    ),
]
#: A process's environment cannot hold NUL.
EnvValue = Annotated[str, msgspec.Meta(pattern=whole("[^\\x00]*"), max_length=32768)]
LabelName = Annotated[str, msgspec.Meta(pattern=LABEL_NAME_PATTERN)]
LabelValue = Annotated[str, msgspec.Meta(pattern=LABEL_VALUE_PATTERN)]
#: What makes a retried create the same create (pod names are derived from it).
IdempotencyKey = Annotated[str, msgspec.Meta(pattern=whole("[!-~]{1,255}"))]
#: A group's name: a DNS label (it is written into the pods' annotations).
GroupName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]


# The create request, defined once: the facade decodes and validates it and renders the pod
# from its fields; the SDK's create keywords (``sandman.wire.create_request``, the generated
# ``CreateOptions``), the ``sandman create`` flags and the trainer guide's table of create
# fields are read from it, descriptions and defaults included. (A comment, not the
# docstring: the docstring is the OpenAPI document's description of the request.)
class CreateSandbox(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One sandbox: an unmodified task image plus Sandman's daemon."""

    image: Annotated[ImageRef, msgspec.Meta(description="the task image, pulled unmodified")]
    owner: Annotated[
        OwnerName,
        msgspec.Meta(description="the run it belongs to (a label value, 1-63 characters)"),
    ]
    sandbox_class: Annotated[
        str, msgspec.Meta(description="the sandbox class: CPU, memory, runtime (GET /v1/classes)")
    ] = msgspec.field(default=DEFAULT_CLASS, name="class")
    ttl_s: Annotated[
        Seconds, msgspec.Meta(description="seconds after its creation the sandbox is deleted")
    ] = DEFAULT_TTL_S
    idle_timeout_s: Annotated[
        Seconds | None,
        msgspec.Meta(description="seconds without a tool call after which it ends; unset: never"),
    ] = None
    env: Annotated[
        dict[EnvName, EnvValue],
        msgspec.Meta(description="environment variables of every command run in the sandbox"),
    ] = msgspec.field(default_factory=dict)
    labels: Annotated[
        dict[LabelName, LabelValue],
        msgspec.Meta(description="labels to find the sandbox by (list ?label=k=v)"),
    ] = msgspec.field(default_factory=dict)


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
    #: Sandboxes released.
    released: int
    #: Image announcements (``POST /v1/prepare``) of the owner deleted with them.
    preparations: int = 0


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


# --- query strings: one Struct per operation, decoded from the query (numbers from text) ----
# Optional parameters default to UNSET, never None: a query string has no null, and the
# lenient text-to-type conversion would read ``state=null`` as None.


class GetQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``GET /v1/sandboxes/{id}``: without ``wait``, the sandbox now."""

    wait: Literal["ready", "started", "final"] | msgspec.UnsetType = msgspec.UNSET
    timeout_s: Annotated[float, msgspec.Meta(ge=0, le=MAX_WAIT_S)] = DEFAULT_WAIT_S


class ListQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``GET /v1/sandboxes``: every filter given must hold (``label`` may repeat)."""

    owner: OwnerName | msgspec.UnsetType = msgspec.UNSET
    label: list[
        Annotated[
            str,
            msgspec.Meta(
                pattern=whole(f"{_LABEL_NAME}={_LABEL_VALUE}"),
                description="`k=v`: a label name, `=`, a label value",
            ),
        ]
    ] = msgspec.field(default_factory=list)
    state: SandboxState | msgspec.UnsetType = msgspec.UNSET
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE
    after: Annotated[str, msgspec.Meta(min_length=1, max_length=512)] | msgspec.UnsetType = (
        msgspec.field(default=msgspec.UNSET, name="continue")
    )


class OwnerQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``DELETE /v1/sandboxes?owner=``: the owner is required (never "everyone")."""

    owner: OwnerName
