"""Typed SDK exceptions: one class per thing a trainer branches on, mapped from ``reason``.

The facade and the sandbox daemon answer every failure as ``{"error": {"reason", "message"}}``
with a stable machine-readable ``reason``; the SDK turns that into an exception whose *type*
answers the question trainer code actually asks: retry, or give up on this sandbox?

- :class:`RetriableError`: the same call may succeed later (429 with ``retry_after``, 502,
  503, 504, a reset connection). The SDK retries idempotent calls itself; what reaches you
  has exhausted the :class:`~sandman.sdk.settings.RetryPolicy`.
- :class:`TerminalError`: retrying the same call cannot help (bad input, bad token, a sandbox
  that is gone or never started). A failed start carries the sandbox's last state.

Causes are chained (``raise ... from``), so the transport error stays in the traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandman.wire.facade import Sandbox as SandboxView

__all__ = [
    "AdmissionFailed",
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


class SandmanError(Exception):
    """Any failure reported by Sandman: HTTP ``status`` (0: no answer), ``reason``, ``message``."""

    retriable = False

    def __init__(
        self, status: int, reason: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        #: Seconds the server asked us to wait (``Retry-After``), if it said.
        self.retry_after = retry_after


class RetriableError(SandmanError):
    """The same call may succeed later; idempotent calls were already retried with backoff."""

    retriable = True


class TerminalError(SandmanError):
    """Retrying the same call will not help."""


# --- retriable ------------------------------------------------------------------------------
class ConnectionFailed(RetriableError):
    """No HTTP answer: connection refused or reset, or the request timed out on our side."""


class RateLimited(RetriableError):
    """429: ``rate_limited``, ``cluster_throttled``, ``too_many_execs``...; see ``retry_after``."""


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
        status: int,
        reason: str,
        message: str,
        *,
        retry_after: float | None = None,
        sandbox: SandboxView | None = None,
    ) -> None:
        super().__init__(status, reason, message, retry_after=retry_after)
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


_BY_REASON: dict[str, type[SandmanError]] = {
    "quota_exceeded": QuotaExceeded,
    "rate_limited": RateLimited,
    "cluster_throttled": RateLimited,
    "cluster_error": ServerError,
    "cluster_forbidden": ServerError,
    "sandbox_not_found": SandboxNotFound,
    "sandbox_not_ready": SandboxNotReady,
    "sandbox_terminated": SandboxTerminated,
    "sandbox_failed": SandboxFailed,
    "daemon_unreachable": DaemonUnreachable,
    "daemon_timeout": DaemonTimeout,
    "cluster_unavailable": ServiceUnavailable,
    "unschedulable": Unschedulable,
    "image_pull_failed": ImagePullFailed,
    "admission_failed": AdmissionFailed,
    "preparation_timeout": PreparationTimeout,
    # The facade's secret or the pod changed under us: retrying the same call will not help.
    "daemon_rejected_token": ServerError,
}
_BY_STATUS: dict[int, type[SandmanError]] = {
    400: InvalidRequest,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFound,
    405: InvalidRequest,
    409: Conflict,
    410: SandboxTerminated,
    413: InvalidRequest,
    429: RateLimited,
    502: ServiceUnavailable,
    503: ServiceUnavailable,
    504: ServiceUnavailable,  # a gateway in front of the facade; daemon_timeout is mapped above
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
    """The typed exception for an error answer (reason first, then the status)."""
    cls = _BY_REASON.get(reason) or _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else InvalidRequest
    return cls(status, reason, message, retry_after=parse_retry_after(headers or {}))
