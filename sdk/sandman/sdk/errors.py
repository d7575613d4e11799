"""Typed SDK exceptions: one class per thing a trainer branches on, decoded from ``reason``.

The facade and the sandbox daemon answer every failure as ``{"error": {"reason", "message"}}``
with a stable machine-readable ``reason``; the SDK turns that into an exception whose *type*
answers the question trainer code actually asks: retry, or give up on this sandbox? Which
class a reason becomes is not decided here: the one table of reasons
(:mod:`sandman.wire.errors`, which the servers raise from too) gives each reason its kind,
and :data:`CLASS_OF` names the class of each kind; a reason the table lacks (a newer server,
a gateway's own page) falls back to its status.

- :class:`RetriableError`: the same call may succeed later (429 with ``retry_after_s``, 502,
  503, 504, a reset connection). The SDK retries idempotent calls itself; what reaches you
  has exhausted the :class:`~sandman.sdk.settings.RetryPolicy`.
- :class:`TerminalError`: retrying the same call cannot help (bad input, bad token, a sandbox
  that is gone or never started). A failed start carries the sandbox's last state.

Causes are chained (``raise ... from``), so the transport error stays in the traceback.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sandman.base.errors import Failure
from sandman.wire.errors import Kind, kind_of

if TYPE_CHECKING:
    from sandman.wire.facade import Sandbox as SandboxView

__all__ = [
    "CLASS_OF",
    "AdmissionFailed",
    "ClientReason",
    "CommandFailed",
    "Conflict",
    "ConnectionFailed",
    "DaemonTimeout",
    "DaemonUnreachable",
    "ImagePullFailed",
    "InvalidRequest",
    "NotFound",
    "PermissionDenied",
    "PreparationFailed",
    "PreparationTimeout",
    "QuotaExceeded",
    "RateLimited",
    "RetriableError",
    "SandboxFailed",
    "SandboxNotFound",
    "SandboxNotReady",
    "SandboxStartError",
    "SandboxTerminated",
    "SandboxTimeout",
    "SandmanError",
    "ServerError",
    "ServiceUnavailable",
    "TerminalError",
    "Unauthenticated",
    "Unschedulable",
    "error_for",
    "parse_retry_after",
]


class ClientReason(enum.StrEnum):
    """The reasons of failures the SDK finds itself, which no server answered (so they are
    not in the wire table, :class:`sandman.wire.errors.Reason`, and never collide with it)."""

    #: No HTTP answer: refused, reset, timed out on our side.
    CONNECTION_FAILED = "connection_failed"
    #: A tool call without an answer within its bound.
    TOOL_CALL_TIMEOUT = "tool_call_timeout"
    #: An answer that is not the operation's model.
    INVALID_RESPONSE = "invalid_response"
    #: An error answer whose body is not ``{"error": {...}}`` (a proxy's page): by status.
    HTTP_ERROR = "http_error"
    #: ``CommandResult.check()`` of a command that failed or timed out.
    COMMAND_FAILED = "command_failed"
    #: ``wait_ready`` ran out of time; ``UNSCHEDULABLE`` when no node could take it.
    SANDBOX_TIMEOUT = "sandbox_timeout"
    UNSCHEDULABLE = "unschedulable"
    #: An announcement's ``wait_ready``: timed out, or the announcement ended.
    PREPARATION_TIMEOUT = "preparation_timeout"
    PREPARATION_INVALID = "preparation_invalid"
    PREPARATION_EXPIRED = "preparation_expired"


class SandmanError(Failure):
    """Any failure reported by Sandman: ``message``, then ``reason`` (stable,
    machine-readable), HTTP ``status`` (0: no answer), ``retry_after_s`` (the server's
    ``Retry-After``, if it said) and ``retriable`` (the class's)."""

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        status: int = 0,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, reason=reason, status=status, retry_after_s=retry_after_s)


class RetriableError(SandmanError):
    """The same call may succeed later; idempotent calls were already retried with backoff."""

    retriable = True


class TerminalError(SandmanError):
    """Retrying the same call will not help."""


# --- retriable ------------------------------------------------------------------------------
class ConnectionFailed(RetriableError):
    """No HTTP answer: connection refused or reset, or the request timed out on our side."""


class RateLimited(RetriableError):
    """429: ``rate_limited``, ``cluster_throttled``, ``too_many_execs``...: ``retry_after_s``."""


class QuotaExceeded(RateLimited):
    """429 ``quota_exceeded``: the tenant has its maximum of live sandboxes; release some or
    wait (retried with backoff like any 429)."""


class ServiceUnavailable(RetriableError):
    """503: ``cluster_unavailable`` or another temporary failure behind the facade."""


class DaemonUnreachable(RetriableError):
    """502 ``daemon_unreachable``: the facade could not reach the sandbox's daemon."""


class DaemonTimeout(RetriableError):
    """504 ``daemon_timeout``: the sandbox's daemon did not answer in time."""


# --- terminal -------------------------------------------------------------------------------
class InvalidRequest(TerminalError):
    """400 / 413 / 405: the request itself is wrong (the message names the field)."""


class Unauthenticated(TerminalError):
    """401: missing or unknown token (``SANDMAN_TOKEN``)."""


class PermissionDenied(TerminalError):
    """403."""


class NotFound(TerminalError):
    """404: a file, session, process... that does not exist."""


class SandboxNotFound(NotFound):
    """404 ``sandbox_not_found``: unknown id, or released (and forgotten) already."""


class Conflict(TerminalError):
    """409: e.g. ``idempotency_key_reused``, ``session_exists``, ``file_exists``."""


class SandboxNotReady(Conflict):
    """409 ``sandbox_not_ready``: a tool call before the sandbox is ready; ``wait_ready`` first."""


class ServerError(TerminalError):
    """500 and other unexpected answers (a bug on the server side; it is logged there)."""


class CommandFailed(TerminalError):
    """``CommandResult.check()``: the command exited non-zero or timed out."""


class SandboxTerminated(TerminalError):
    """The sandbox was usable and is not any more (released, expired, its node lost...)."""

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        status: int = 0,
        retry_after_s: float | None = None,
        sandbox: SandboxView | None = None,
    ) -> None:
        super().__init__(message, reason=reason, status=status, retry_after_s=retry_after_s)
        #: The sandbox's last known state (``state``, ``reason``, ``message``), if known.
        self.sandbox = sandbox


class SandboxStartError(SandboxTerminated):
    """The sandbox never became ready; ``sandbox`` is its last state."""


class SandboxFailed(SandboxStartError):
    """State ``failed`` (or 410 ``sandbox_failed``) for a reason with no class of its own."""


class ImagePullFailed(SandboxFailed):
    """``image_pull_failed``: the task image cannot be pulled."""


class AdmissionFailed(SandboxFailed):
    """``admission_failed``: kubelets kept rejecting it (replacements exhausted)."""


class SandboxTimeout(SandboxStartError):
    """Not ready within the timeout; ``sandbox`` says where it was (state, reason)."""


class Unschedulable(SandboxTimeout):
    """Not ready in time and still pending because no node can take it (the scheduler's
    message says why)."""


class PreparationFailed(TerminalError):
    """An announcement (``client.prepare``) that cannot get ready: Invalid or Expired."""


class PreparationTimeout(TerminalError):
    """``wait_ready`` of an announcement timed out; the announcement still counts."""


#: The exception class of each kind of answer (:class:`sandman.wire.errors.Kind`).
CLASS_OF: dict[Kind, type[SandmanError]] = {
    Kind.INVALID_REQUEST: InvalidRequest,
    Kind.UNAUTHENTICATED: Unauthenticated,
    Kind.PERMISSION_DENIED: PermissionDenied,
    Kind.NOT_FOUND: NotFound,
    Kind.SANDBOX_NOT_FOUND: SandboxNotFound,
    Kind.CONFLICT: Conflict,
    Kind.SANDBOX_NOT_READY: SandboxNotReady,
    Kind.SANDBOX_TERMINATED: SandboxTerminated,
    Kind.SANDBOX_FAILED: SandboxFailed,
    Kind.SERVER_ERROR: ServerError,
    Kind.RATE_LIMITED: RateLimited,
    Kind.QUOTA_EXCEEDED: QuotaExceeded,
    Kind.SERVICE_UNAVAILABLE: ServiceUnavailable,
    Kind.DAEMON_UNREACHABLE: DaemonUnreachable,
    Kind.DAEMON_TIMEOUT: DaemonTimeout,
}


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds (the delta form; the facade never sends a date)."""
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


def error_for(
    status: int, reason: str, message: str, headers: Mapping[str, str] | None = None
) -> SandmanError:
    """The typed exception for an error answer: the class of the reason's kind in the table,
    or of its status for a reason the table lacks (:func:`sandman.wire.errors.kind_of`)."""
    cls = CLASS_OF[kind_of(status, reason)]
    retry_after_s = parse_retry_after(headers or {})
    return cls(message, reason=reason, status=status, retry_after_s=retry_after_s)
