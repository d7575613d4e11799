"""One error hierarchy for every Kubernetes call Sandman makes (controller, facade, node agent).

Why: Sandman reaches the API server over three transports — one aiohttp session
(:class:`kube.client.KubeClient`'s ordinary calls and watches), the hand-written lean pool
(:mod:`kube.lean`: binds, pod creates, every call of the node agent's
:class:`kube.light.LightClient`) and, for credentials only, kr8s (httpx underneath) — and
each fails in its own exception types. Callers should not care which transport served a
request: they catch :class:`NotFound`, :class:`Conflict`, :class:`TooManyRequests` and so
on. Every error is a :class:`sandman.base.errors.Failure`: the HTTP ``status`` (0: no
response), the ``reason`` and ``message`` of the server's ``Status`` object (the whole object
as ``body``), ``retriable``, ``retry_after_s``; the transport's exception is chained as its
``__cause__``.

``retriable`` means "worth repeating", not "repeated": whether a request is repeated is the
retry rule's decision (:mod:`kube.retry`), which also asks whether the request is safe to
repeat.

Mapping follows the API server's ``Status.reason`` first (it distinguishes 409 AlreadyExists
from 409 Conflict) and falls back to the HTTP status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandman.base.errors import Failure

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


class KubeError(Failure):
    """A failed Kubernetes API call. ``status`` is the HTTP status (0: no response)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str | None = None,
        retry_after_s: float | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, status=status, reason=reason, retry_after_s=retry_after_s)
        #: The server's ``Status`` object, as decoded ({} when there was none).
        self.body: Mapping[str, Any] = body or {}


class TransportError(KubeError):
    """No HTTP response: connection refused/reset, TLS failure, client-side timeout.

    ``sent`` is False when the connection failed before the request went out (then it is
    always safe to repeat)."""

    retriable = True

    def __init__(self, message: str, *, sent: bool = True, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.sent = sent


class SendDeadlinePassed(KubeError):
    """Not sent: the caller's ``send_by`` passed while the request waited for a token or a
    retry (a pre-placed create whose placement ran out: kube/placement.py)."""


class BadRequest(KubeError):
    status = 400


class Unauthorized(KubeError):
    status = 401


class Forbidden(KubeError):
    status = 403


class NotFound(KubeError):
    status = 404


class Conflict(KubeError):
    """409: optimistic-concurrency or precondition failure (also "already bound")."""

    status = 409


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: a create found the name taken."""


class Gone(KubeError):
    """410: the resourceVersion is too old (a watch must relist)."""

    status = 410


class Invalid(KubeError):
    status = 422


class TooManyRequests(KubeError):
    """429: the server (API priority and fairness) asks us to slow down; ``retry_after_s``
    is its Retry-After (None: no hint)."""

    status = 429
    retriable = True


class ServerError(KubeError):
    """5xx from the server."""

    status = 500
    retriable = True


class ServerTimeout(ServerError):
    """504 (or reason Timeout): the server gave up; the request may or may not have run."""

    status = 504


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
_BY_STATUS: dict[int, type[KubeError]] = {
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
    status: int, decoded: Any, retry_after: str | None = None, *, what: str = ""
) -> KubeError:
    """Build the error for an HTTP ``status`` and the decoded body (a ``Status`` or anything);
    ``retry_after``: the answer's Retry-After header."""
    body: Mapping[str, Any] = decoded if isinstance(decoded, Mapping) else {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or (decoded if isinstance(decoded, str) else "") or what)
    cls = _BY_REASON.get(reason) or _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else KubeError
    if status == 409 and cls is Conflict and reason == "AlreadyExists":
        cls = AlreadyExists
    message = message or f"HTTP {status}"
    after = None
    if cls is TooManyRequests:
        after = _parse_retry_after(retry_after)
        if after is None:
            after = float((body.get("details") or {}).get("retryAfterSeconds") or 0) or None
    return cls(message, status=status, reason=reason, retry_after_s=after, body=body)


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
