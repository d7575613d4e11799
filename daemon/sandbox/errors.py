"""The daemon's error hierarchy: every failure a caller can cause maps to one HTTP status and a
machine-readable ``reason``.

Handlers raise these; the server turns them into ``{"error": {"reason", "message"}}`` bodies.
Anything else escaping a handler is a bug and becomes a 500 ``internal`` (logged, never
crashing the daemon). Causes are chained (``raise ... from exc``) so logs keep the origin.
"""

from __future__ import annotations

__all__ = [
    "BadRequest",
    "Conflict",
    "DaemonError",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "RequestTimeout",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
]


class DaemonError(Exception):
    """Base class: an expected failure with an HTTP status and a stable reason string."""

    status: int = 500
    default_reason: str = "internal"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason

    def headers(self) -> list[tuple[str, str]]:
        return []


class BadRequest(DaemonError):
    status = 400
    default_reason = "bad_request"


class Unauthorized(DaemonError):
    status = 401
    default_reason = "unauthorized"

    def headers(self) -> list[tuple[str, str]]:
        return [("www-authenticate", 'Bearer realm="sandman"')]


class Forbidden(DaemonError):
    status = 403
    default_reason = "forbidden"


class NotFound(DaemonError):
    status = 404
    default_reason = "not_found"


class Conflict(DaemonError):
    status = 409
    default_reason = "conflict"


class RequestTimeout(DaemonError):
    status = 408
    default_reason = "request_timeout"


class PayloadTooLarge(DaemonError):
    status = 413
    default_reason = "body_too_large"


class TooManyRequests(DaemonError):
    status = 429
    default_reason = "too_many_requests"

    def __init__(self, message: str, *, reason: str | None = None, retry_after_s: int = 1) -> None:
        super().__init__(message, reason=reason)
        self.retry_after_s = retry_after_s

    def headers(self) -> list[tuple[str, str]]:
        return [("retry-after", str(self.retry_after_s))]


class Unavailable(DaemonError):
    status = 503
    default_reason = "unavailable"
