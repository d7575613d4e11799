"""One error hierarchy for every Kubernetes call Sandman makes (controller and facade).

Why: the controller talks to the API server through two transports (kr8s/httpx for ordinary
calls, aiohttp for the hot paths) and each raises its own exception types. Callers should not
care which transport served a request: they catch :class:`NotFound`, :class:`Conflict`,
:class:`TooManyRequests` and so on. Every error keeps the HTTP code, the ``reason`` and
``message`` of the server's ``Status`` object, and chains the transport's exception as its
``__cause__``.

Mapping follows the API server's ``Status.reason`` first (it distinguishes 409 AlreadyExists
from 409 Conflict) and falls back to the HTTP code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AlreadyExists",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "NotFound",
    "SendDeadlinePassed",
    "ServerError",
    "ServerTimeout",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "error_from_status",
    "from_kr8s",
]


class KubeError(Exception):
    """A failed Kubernetes API call. ``code`` is the HTTP status (0: no response)."""

    code = 0
    retryable = False  # worth repeating when the request is safe to repeat
    #: Seconds the server asked us to wait (429's Retry-After); None: no hint.
    retry_after: float | None = None

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        reason: str = "",
        status: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.reason = reason
        self.status: Mapping[str, Any] = status or {}


class TransportError(KubeError):
    """No HTTP response: connection refused/reset, TLS failure, client-side timeout.

    ``sent`` is False when the connection failed before the request went out (then it is
    always safe to repeat)."""

    retryable = True

    def __init__(self, message: str, *, sent: bool = True, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.sent = sent


class SendDeadlinePassed(KubeError):
    """Not sent: the caller's ``send_by`` passed while the request waited for a token or a
    retry (a pre-placed create whose placement ran out: kube/placement.py)."""


class BadRequest(KubeError):
    code = 400


class Unauthorized(KubeError):
    code = 401


class Forbidden(KubeError):
    code = 403


class NotFound(KubeError):
    code = 404


class Conflict(KubeError):
    """409: optimistic-concurrency or precondition failure (also "already bound")."""

    code = 409


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: a create found the name taken."""


class Gone(KubeError):
    """410: the resourceVersion is too old (a watch must relist)."""

    code = 410


class Invalid(KubeError):
    code = 422


class TooManyRequests(KubeError):
    """429: the server (API priority and fairness) asks us to slow down."""

    code = 429
    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ServerError(KubeError):
    """5xx from the server."""

    code = 500
    retryable = True


class ServerTimeout(ServerError):
    """504 (or reason Timeout): the server gave up; the request may or may not have run."""

    code = 504


_BY_REASON: dict[str, type[KubeError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "AlreadyExists": AlreadyExists,
    "Conflict": Conflict,
    "Gone": Gone,
    "Expired": Gone,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
    "Timeout": ServerTimeout,
    "InternalError": ServerError,
    "ServiceUnavailable": ServerError,
}
_BY_CODE: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    504: ServerTimeout,
}


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from kube-apiserver; fall back to our backoff


def error_from_status(
    code: int, status: Any, retry_after: str | None = None, *, what: str = ""
) -> KubeError:
    """Build the error for an HTTP ``code`` and the decoded body (a ``Status`` or anything)."""
    body: Mapping[str, Any] = status if isinstance(status, Mapping) else {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or (status if isinstance(status, str) else "") or what)
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code)
    if cls is None:
        cls = ServerError if code >= 500 else KubeError
    if code == 409 and cls is Conflict and reason == "AlreadyExists":
        cls = AlreadyExists
    message = message or f"HTTP {code}"
    if cls is TooManyRequests:
        after = _parse_retry_after(retry_after)
        if after is None:
            after = float((body.get("details") or {}).get("retryAfterSeconds") or 0) or None
        return TooManyRequests(message, retry_after=after, code=code, reason=reason, status=body)
    return cls(message, code=code, reason=reason, status=body)


def from_kr8s(exc: BaseException) -> KubeError:
    """Translate an exception raised by kr8s (httpx underneath) into this hierarchy.

    Use as ``except Exception as e: raise from_kr8s(e) from e``.
    """
    import httpx
    import kr8s

    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, kr8s.ServerError) and exc.response is not None:
        response = exc.response
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        return error_from_status(response.status_code, body, response.headers.get("Retry-After"))
    if isinstance(exc, kr8s.NotFoundError):
        return NotFound(str(exc), reason="NotFound")
    if isinstance(exc, (kr8s.APITimeoutError, httpx.TransportError)):
        return TransportError(str(exc) or type(exc).__name__)
    return KubeError(str(exc) or type(exc).__name__)
