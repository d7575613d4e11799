"""Every error reason the facade and the sandbox daemon answer, once: status, retriable, meaning.

Why one table: a failure leaves either server as ``{"error": {"reason", "message"}}`` with an
HTTP status, and the trainer's SDK turns it into an exception whose class says what to do
(retry, or give up on this call). Written as loose strings, a reason was spelled at each of
~40 facade and ~70 daemon raise sites, its status beside it, and mapped again in the SDK —
three places to keep in step, and they had drifted (a daemon ``permission_denied`` built as a
500 and patched to 403 afterwards, ``too_many_links`` a 400 or a 409 by errno). Here each
reason is one :class:`Reason` member carrying

- ``status``: the HTTP status it is answered with (the servers take it from here);
- ``kind``: what a client does about it (:class:`Kind`: the SDK raises one exception class
  per kind, and ``kind.retriable`` says whether the same call may succeed later);
- ``side``: which server answers it (:class:`Side`; the facade also forwards the daemon's
  answers to tool calls unchanged, so a trainer meets both);
- ``meaning``: one line for people (docs/facade.md and docs/daemon-api.md list the table).

:func:`kind_of` is the decoding rule both the SDK and the tests use: a reason in the table has
its kind; an unknown one (a newer server, a gateway in front of the facade) falls back to its
status. :class:`ErrorBody` is the answer's one wire model; :func:`encode_error` writes it for
both servers.

msgspec and the standard library only: the daemon imports this in every sandbox.
"""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec

__all__ = [
    "REASON_HEADER",
    "ErrorBody",
    "ErrorDetail",
    "Kind",
    "Reason",
    "Side",
    "decode_error",
    "encode_error",
    "kind_of",
    "reason_named",
]


class Kind(enum.StrEnum):
    """What a client does about an answer; the SDK raises one exception class per kind."""

    INVALID_REQUEST = "invalid_request"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"
    NOT_FOUND = "not_found"
    SANDBOX_NOT_FOUND = "sandbox_not_found"
    CONFLICT = "conflict"
    SANDBOX_NOT_READY = "sandbox_not_ready"
    SANDBOX_TERMINATED = "sandbox_terminated"
    SANDBOX_FAILED = "sandbox_failed"
    SERVER_ERROR = "server_error"
    RATE_LIMITED = "rate_limited"
    QUOTA_EXCEEDED = "quota_exceeded"
    SERVICE_UNAVAILABLE = "service_unavailable"
    DAEMON_UNREACHABLE = "daemon_unreachable"
    DAEMON_TIMEOUT = "daemon_timeout"

    @property
    def retriable(self) -> bool:
        """The same call may succeed later (the SDK retries idempotent calls itself)."""
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        Kind.RATE_LIMITED,
        Kind.QUOTA_EXCEEDED,
        Kind.SERVICE_UNAVAILABLE,
        Kind.DAEMON_UNREACHABLE,
        Kind.DAEMON_TIMEOUT,
    }
)


class Side(enum.Flag):
    """Which server answers a reason."""

    FACADE = enum.auto()
    DAEMON = enum.auto()
    BOTH = FACADE | DAEMON


# Short names for the table's columns, so each row fits a line or two (deleted after it).
F, D, B = Side.FACADE, Side.DAEMON, Side.BOTH
K = Kind


class Reason(enum.StrEnum):
    """One error reason: the member's value is the wire string (module docstring)."""

    status: int
    kind: Kind
    side: Side
    meaning: str

    def __new__(cls, wire: str, status: int, kind: Kind, side: Side, meaning: str) -> Reason:
        member = str.__new__(cls, wire)
        member._value_ = wire
        member.status, member.kind, member.side, member.meaning = status, kind, side, meaning
        return member

    @property
    def retriable(self) -> bool:
        return self.kind.retriable

    @classmethod
    def named(cls, wire: str) -> Reason:
        """The reason of that wire string; LookupError when the table has none (a reason
        computed at a raise site, such as ``invalid_<parameter>``, must be a row)."""
        found = reason_named(wire)
        if found is None:
            raise LookupError(f"no error reason {wire!r} in sandman.wire.errors")
        return found

    # fmt: off
    # --- 400: the request is wrong; the message names what ---------------------------------
    BAD_REQUEST = ("bad_request", 400, K.INVALID_REQUEST, B,
        "the request cannot be read (the router refused it; the body ended early)")
    INVALID_REQUEST = ("invalid_request", 400, K.INVALID_REQUEST, B,
        "the body is not the operation's model (the message names the field), or is missing")
    INVALID_JSON = ("invalid_json", 400, K.INVALID_REQUEST, B, "the body is not JSON")
    UNKNOWN_PARAMETER = ("unknown_parameter", 400, K.INVALID_REQUEST, F,
        "a query parameter the operation does not have")
    INVALID_PATH = ("invalid_path", 400, K.INVALID_REQUEST, B,
        "a tool-call path segment outside `[A-Za-z0-9._~-]`, empty, `.` or `..` (facade); a "
        "file path the operation refuses: NUL, `/` as a target, a move into itself (daemon)")
    UNKNOWN_CLASS = ("unknown_class", 400, K.INVALID_REQUEST, F,
        "`class` is not one of `GET /v1/classes`")
    BATCH_TOO_LARGE = ("batch_too_large", 400, K.INVALID_REQUEST, F,
        "a batch over the tenant's burst or sandbox limit")
    INVALID_OWNER = ("invalid_owner", 400, K.INVALID_REQUEST, F,
        "an owner (body, `?owner=`, `/v1/owners/{owner}`) that is not a label value")
    OWNER_REQUIRED = ("owner_required", 400, K.INVALID_REQUEST, F,
        "releasing an owner's sandboxes without `?owner=`")
    INVALID_IMAGE = ("invalid_image", 400, K.INVALID_REQUEST, F,
        "an image reference outside the rule (1-512 printable ASCII characters, no spaces)")
    INVALID_ENV = ("invalid_env", 400, K.INVALID_REQUEST, B,
        "an environment name outside the rule or reserved (`SANDMAN_`), or a value with NUL")
    INVALID_LABEL = ("invalid_label", 400, K.INVALID_REQUEST, F,
        "a label (`labels`, `?label=k=v`) that is not a label name and value")
    INVALID_TIMEOUT_S = ("invalid_timeout_s", 400, K.INVALID_REQUEST, F,
        "`timeout_s` of a wait: a number from 0 to 600")
    INVALID_WAIT = ("invalid_wait", 400, K.INVALID_REQUEST, F,
        "`wait`: `ready`, `started` or `final`")
    INVALID_LIMIT = ("invalid_limit", 400, K.INVALID_REQUEST, F,
        "`limit` of a list: an integer from 1 to 1000")
    INVALID_STATE = ("invalid_state", 400, K.INVALID_REQUEST, F, "`state`: a sandbox state")
    INVALID_CONTINUE = ("invalid_continue", 400, K.INVALID_REQUEST, F,
        "a `continue` token the facade did not issue (made up, truncated, altered)")
    INVALID_IDEMPOTENCY_KEY = ("invalid_idempotency_key", 400, K.INVALID_REQUEST, F,
        "an `Idempotency-Key` outside 1-255 printable ASCII characters")
    DUPLICATE_IMAGE = ("duplicate_image", 400, K.INVALID_REQUEST, F,
        "an image named twice in one `POST /v1/prepare`")
    PREPARE_TOO_LARGE = ("prepare_too_large", 400, K.INVALID_REQUEST, F,
        "one announcement over the tenant's `max_prepared_images` or `max_prepared_sandboxes`")
    BAD_HTTP = ("bad_http", 400, K.INVALID_REQUEST, D, "not parseable as HTTP/1.1")
    INCOMPLETE_BODY = ("incomplete_body", 400, K.INVALID_REQUEST, D,
        "the request body broke off (framing error)")
    INVALID_COMMAND = ("invalid_command", 400, K.INVALID_REQUEST, D,
        "not exactly one of `argv` and `command`, an empty `argv`, or a NUL byte")
    INVALID_BASE64 = ("invalid_base64", 400, K.INVALID_REQUEST, D,
        "`stdin` or a base64 path that does not decode")
    INVALID_SIGNAL = ("invalid_signal", 400, K.INVALID_REQUEST, D, "an unknown signal name")
    INVALID_QUERY = ("invalid_query", 400, K.INVALID_REQUEST, D,
        "a query parameter of the wrong type or range (`resume_from`, `tail_bytes`...)")
    INVALID_CWD = ("invalid_cwd", 400, K.INVALID_REQUEST, D, "`cwd` empty or with a NUL byte")
    INVALID_SHELL = ("invalid_shell", 400, K.INVALID_REQUEST, D,
        "`shell` empty or with a NUL byte")
    INVALID_MODE = ("invalid_mode", 400, K.INVALID_REQUEST, D, "a file mode outside 0..7777")
    INVALID_RANGE = ("invalid_range", 400, K.INVALID_REQUEST, D,
        "a negative `offset` or `length`")
    MISSING_PATH = ("missing_path", 400, K.INVALID_REQUEST, D, "the `path` query is missing")
    PATH_TOO_LONG = ("path_too_long", 400, K.INVALID_REQUEST, D,
        "a name or path over the kernel's limits")
    TOO_MANY_LINKS = ("too_many_links", 400, K.INVALID_REQUEST, D,
        "a symbolic-link loop, or a file with the most hard links it may have")
    CROSS_DEVICE = ("cross_device", 400, K.INVALID_REQUEST, D,
        "a move between file systems")
    IS_A_DIRECTORY = ("is_a_directory", 400, K.INVALID_REQUEST, D,
        "a file operation on a directory")
    NOT_A_DIRECTORY = ("not_a_directory", 400, K.INVALID_REQUEST, D,
        "a path through something that is not a directory")
    NOT_A_REGULAR_FILE = ("not_a_regular_file", 400, K.INVALID_REQUEST, D,
        "a read of a device, socket or pipe")
    SPAWN_FAILED = ("spawn_failed", 400, K.INVALID_REQUEST, D,
        "the program (or shell) cannot be started")
    UNSAFE_ARCHIVE = ("unsafe_archive", 400, K.INVALID_REQUEST, D,
        "a tar member that would land outside the target (absolute, `..`, a link out)")
    INVALID_ARCHIVE = ("invalid_archive", 400, K.INVALID_REQUEST, D, "not a tar stream")
    OUTPUT_CAP_TOO_LARGE = ("output_cap_too_large", 400, K.INVALID_REQUEST, D,
        "`max_output_bytes` over the daemon's cap")
    RESUME_PAST_END = ("resume_past_end", 400, K.INVALID_REQUEST, D,
        "`resume_from` past the events the exec has sent")
    INVALID_PORT = ("invalid_port", 400, K.INVALID_REQUEST, B,
        "a forwarded port (`/ports/{port}/`) that is not a decimal from 1 to 65535")
    PORT_RESERVED = ("port_reserved", 400, K.INVALID_REQUEST, B,
        "a forwarded port that is the sandbox daemon's own: tool calls have their own routes")

    # --- 401 / 403 ---------------------------------------------------------------------------
    UNAUTHENTICATED = ("unauthenticated", 401, K.UNAUTHENTICATED, F,
        "a missing or unknown bearer token (`SANDMAN_TOKEN`)")
    MISSING_TOKEN = ("missing_token", 401, K.UNAUTHENTICATED, D, "no bearer token")
    INVALID_TOKEN = ("invalid_token", 401, K.UNAUTHENTICATED, D, "a wrong bearer token")
    PERMISSION_DENIED = ("permission_denied", 403, K.PERMISSION_DENIED, D,
        "the file system refused the operation (EACCES, EPERM)")
    READ_ONLY_FILE_SYSTEM = ("read_only_file_system", 403, K.PERMISSION_DENIED, D,
        "a write to a read-only file system")
    CLASS_NOT_ALLOWED = ("class_not_allowed", 403, K.PERMISSION_DENIED, F,
        "a sandbox class outside the tenant's `allowed_classes`")
    REGISTRY_NOT_ALLOWED = ("registry_not_allowed", 403, K.PERMISSION_DENIED, F,
        "an image (create or `POST /v1/prepare`) from a registry outside the tenant's "
        "`allowed_registries`")

    # --- 404 / 405 ---------------------------------------------------------------------------
    NOT_FOUND = ("not_found", 404, K.NOT_FOUND, F,
        "no operation at that path (a route, or a daemon operation under a tool-call prefix)")
    SANDBOX_NOT_FOUND = ("sandbox_not_found", 404, K.SANDBOX_NOT_FOUND, F,
        "no such sandbox for this tenant (another tenant's is not found either)")
    PREPARATION_NOT_FOUND = ("preparation_not_found", 404, K.NOT_FOUND, F,
        "no such announcement for this tenant")
    NO_SUCH_ENDPOINT = ("no_such_endpoint", 404, K.NOT_FOUND, D, "no operation at that path")
    EXEC_NOT_FOUND = ("exec_not_found", 404, K.NOT_FOUND, D,
        "no running or kept exec with that id")
    SESSION_NOT_FOUND = ("session_not_found", 404, K.NOT_FOUND, D, "no session of that name")
    PROCESS_NOT_FOUND = ("process_not_found", 404, K.NOT_FOUND, D,
        "no background process with that id")
    FILE_NOT_FOUND = ("file_not_found", 404, K.NOT_FOUND, D, "no such file or directory")
    METHOD_NOT_ALLOWED = ("method_not_allowed", 405, K.INVALID_REQUEST, B,
        "another method is allowed at that path (the facade says which in `Allow`)")

    # --- 408 / 409 / 410 / 413 / 431 -------------------------------------------------------
    HEADER_TIMEOUT = ("header_timeout", 408, K.INVALID_REQUEST, D,
        "the request head did not arrive in time")
    BODY_TIMEOUT = ("body_timeout", 408, K.INVALID_REQUEST, D,
        "the request body stalled")
    IDEMPOTENCY_KEY_REUSED = ("idempotency_key_reused", 409, K.CONFLICT, F,
        "the Idempotency-Key was used for another request (a batch: another spec or count)")
    SANDBOX_NOT_READY = ("sandbox_not_ready", 409, K.SANDBOX_NOT_READY, F,
        "a tool call before the sandbox is ready: wait for ready, then call")
    EXEC_ID_REUSED = ("exec_id_reused", 409, K.CONFLICT, D,
        "a different command under an exec id already used")
    EXEC_ID_IN_USE = ("exec_id_in_use", 409, K.CONFLICT, D,
        "an exec with that id is running and cannot be re-attached this way")
    ARCHIVE_CONFLICT = ("archive_conflict", 409, K.CONFLICT, D,
        "the archive has a file where the target has a directory, or the reverse")
    SESSION_EXISTS = ("session_exists", 409, K.CONFLICT, D, "a session of that name exists")
    SANDBOX_UNCLAIMED = ("sandbox_unclaimed", 409, K.CONFLICT, D,
        "a pool sandbox before its claim: it runs nothing until a create claims it")
    ALREADY_CLAIMED = ("already_claimed", 409, K.CONFLICT, D,
        "another claim has this sandbox, or it never was a pool sandbox")
    SESSION_EXITED = ("session_exited", 409, K.CONFLICT, D, "the session's shell has exited")
    FILE_EXISTS = ("file_exists", 409, K.CONFLICT, D, "the target exists")
    DIRECTORY_NOT_EMPTY = ("directory_not_empty", 409, K.CONFLICT, D,
        "removing a non-empty directory without `recursive`")
    BUSY = ("busy", 409, K.CONFLICT, D, "a mount point or a file in use")
    SANDBOX_TERMINATED = ("sandbox_terminated", 410, K.SANDBOX_TERMINATED, F,
        "the sandbox was usable and is not any more (its `reason` says why)")
    SANDBOX_FAILED = ("sandbox_failed", 410, K.SANDBOX_FAILED, F,
        "the sandbox never became usable (its `reason` says why)")
    BODY_TOO_LARGE = ("body_too_large", 413, K.INVALID_REQUEST, B,
        "a body over the limit (facade: control requests over 1 MiB)")
    ARCHIVE_TOO_LARGE = ("archive_too_large", 413, K.INVALID_REQUEST, D,
        "an archive over the upload cap")
    HEADERS_TOO_LARGE = ("headers_too_large", 431, K.INVALID_REQUEST, D,
        "a request head over h11's limit")

    # --- 429: slow down ----------------------------------------------------------------------
    QUOTA_EXCEEDED = ("quota_exceeded", 429, K.QUOTA_EXCEEDED, F,
        "the tenant has its maximum of live sandboxes: release some, or wait")
    RATE_LIMITED = ("rate_limited", 429, K.RATE_LIMITED, F,
        "over the tenant's create rate; `Retry-After` says when a token is back")
    CLUSTER_THROTTLED = ("cluster_throttled", 429, K.RATE_LIMITED, F,
        "the API server is throttling the facade")
    TOO_MANY_CALLS = ("too_many_calls", 429, K.RATE_LIMITED, F,
        "the tenant has its `max_tool_calls` proxied tool calls in flight; retry when one ends")
    TOO_MANY_WAITS = ("too_many_waits", 429, K.RATE_LIMITED, F,
        "the tenant has its `max_waits` long waits open (`?wait=`, streamed execs, process "
        "waits); retry when one ends")
    LOGIN_THROTTLED = ("login_throttled", 429, K.RATE_LIMITED, F,
        "too many unknown bearer tokens from this address; `Retry-After` says when to try "
        "again (a valid token is never throttled)")
    PREPARE_QUOTA_EXCEEDED = ("prepare_quota_exceeded", 429, K.RATE_LIMITED, F,
        "the tenant's live announcements would pass its caps; fits once some expire")
    TOO_MANY_EXECS = ("too_many_execs", 429, K.RATE_LIMITED, D,
        "the daemon runs its maximum of commands at once")
    TOO_MANY_SESSIONS = ("too_many_sessions", 429, K.RATE_LIMITED, D,
        "the daemon holds its maximum of sessions")
    TOO_MANY_PROCESSES = ("too_many_processes", 429, K.RATE_LIMITED, D,
        "the daemon holds its maximum of background processes")

    # --- 5xx ---------------------------------------------------------------------------------
    INTERNAL = ("internal", 500, K.SERVER_ERROR, B, "a bug (logged); the server keeps serving")
    IO_ERROR = ("io_error", 500, K.SERVER_ERROR, D, "another file-system failure")
    CLUSTER_ERROR = ("cluster_error", 502, K.SERVER_ERROR, F,
        "the API server refused the facade's call (the message says what)")
    CLUSTER_FORBIDDEN = ("cluster_forbidden", 502, K.SERVER_ERROR, F,
        "the facade's RBAC lacks a permission (an operator's fix; logged)")
    DAEMON_REJECTED_TOKEN = ("daemon_rejected_token", 502, K.SERVER_ERROR, F,
        "the sandbox's daemon refused the facade's token (its secret or the pod changed)")
    DAEMON_UNREACHABLE = ("daemon_unreachable", 502, K.DAEMON_UNREACHABLE, F,
        "the facade could not reach the sandbox's daemon")
    PORT_NOT_LISTENING = ("port_not_listening", 502, K.SERVER_ERROR, D,
        "nothing listens on that port inside the sandbox (the connection was refused)")
    UPGRADE_REFUSED = ("upgrade_refused", 502, K.SERVER_ERROR, F,
        "the server in the sandbox did not accept the WebSocket upgrade (the message says "
        "what it answered)")
    CLUSTER_UNAVAILABLE = ("cluster_unavailable", 503, K.SERVICE_UNAVAILABLE, F,
        "the API server failed or could not be reached")
    FACADE_STOPPING = ("facade_stopping", 503, K.SERVICE_UNAVAILABLE, F,
        "this facade replica is stopping (a parked wait ended); another one answers")
    SHUTTING_DOWN = ("shutting_down", 503, K.SERVICE_UNAVAILABLE, D,
        "the daemon is stopping")
    TOO_MANY_CONNECTIONS = ("too_many_connections", 503, K.SERVICE_UNAVAILABLE, D,
        "every connection the daemon allows is busy")
    NO_SCRATCH_DIR = ("no_scratch_dir", 503, K.SERVICE_UNAVAILABLE, D,
        "no writable scratch directory for sessions")
    SESSION_NOT_READY = ("session_not_ready", 503, K.SERVICE_UNAVAILABLE, D,
        "the session's shell did not become ready")
    SESSION_KILLED = ("session_killed", 503, K.SERVICE_UNAVAILABLE, D,
        "the session did not recover from an interrupt and was killed")
    DAEMON_TIMEOUT = ("daemon_timeout", 504, K.DAEMON_TIMEOUT, F,
        "the sandbox's daemon did not answer in time")
    NO_SPACE = ("no_space", 507, K.SERVER_ERROR, D,
        "no space left on the device, or the disk quota is used up")
    # fmt: on


del F, D, B, K

_BY_STATUS: dict[int, Kind] = {
    400: Kind.INVALID_REQUEST,
    401: Kind.UNAUTHENTICATED,
    403: Kind.PERMISSION_DENIED,
    404: Kind.NOT_FOUND,
    405: Kind.INVALID_REQUEST,
    409: Kind.CONFLICT,
    410: Kind.SANDBOX_TERMINATED,
    413: Kind.INVALID_REQUEST,
    429: Kind.RATE_LIMITED,
    502: Kind.SERVICE_UNAVAILABLE,
    503: Kind.SERVICE_UNAVAILABLE,
    504: Kind.SERVICE_UNAVAILABLE,  # a gateway in front of the facade: daemon_timeout is 504 too
}


def reason_named(wire: str) -> Reason | None:
    """The table's reason of that wire string, if there is one."""
    return Reason._value2member_map_.get(wire)  # type: ignore[return-value]


def kind_of(status: int, reason: str) -> Kind:
    """How a client treats an answer: the reason's kind, else its status's (an unknown
    reason: a newer server, or a gateway's own page), else a server error (5xx) or an
    invalid request."""
    known = reason_named(reason)
    if known is not None:
        return known.kind
    found = _BY_STATUS.get(status)
    if found is not None:
        return found
    return Kind.SERVER_ERROR if status >= 500 else Kind.INVALID_REQUEST


# --- the answer's body -----------------------------------------------------------------------
class ErrorDetail(msgspec.Struct):
    """What failed: ``reason`` for programs, ``message`` for people."""

    #: Stable and machine-readable: one of :class:`Reason` (clients take unknown ones too).
    reason: Annotated[str, msgspec.Meta(description="stable machine-readable reason")]
    message: str


class ErrorBody(msgspec.Struct):
    """Every error answer of the facade and the daemon: ``{"error": {"reason", "message"}}``."""

    error: ErrorDetail


_DECODER = msgspec.json.Decoder(ErrorBody)

#: Both servers name the reason of every error answer in this header too: where no body is
#: read (a refused WebSocket upgrade, a HEAD) and where a body could be a sandbox server's
#: own (a forwarded port's answer passes through unchanged, and carries none).
REASON_HEADER = "x-sandman-reason"


def encode_error(reason: Reason, message: str) -> bytes:
    """The body of an error answer. A message may quote a client's path that is not UTF-8
    (a lone surrogate from ``os.fsdecode``): escaped, never a failure here."""
    text = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return msgspec.json.encode(ErrorBody(ErrorDetail(reason=reason.value, message=text)))


def decode_error(raw: bytes) -> ErrorDetail | None:
    """The error of an answer's body; None when it is not one (a proxy's HTML page...)."""
    try:
        return _DECODER.decode(raw).error
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
