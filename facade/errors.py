"""Typed, machine-readable failures of the facade: a reason from the one table, its status.

The same body as the sandbox daemon's errors (``{"error": {"reason", "message"}}``, the wire
model :class:`sandman.wire.errors.ErrorBody`), so a trainer handles one format whether a
failure came from the facade or from inside a sandbox. A :class:`FacadeError` names its
reason (:class:`sandman.wire.errors.Reason`) and nothing else: the status, and whether a
client may retry, are the table's, so no raise site can answer a reason with another status
than the SDK decodes it by.

Failures of the API server behind the facade are translated, never passed through raw: a
throttled API server is a 429 with its Retry-After (the trainer should slow down), anything
else a 503 ``cluster_unavailable`` (retriable) with the cause chained for the logs.
"""

from __future__ import annotations

from aiohttp import web

from kube import KubeError, TooManyRequests, TransportError
from kube.errors import ServerError
from sandman.base.errors import Failure
from sandman.wire.errors import REASON_HEADER, Reason, encode_error

__all__ = ["FacadeError", "error_response", "from_kube_error"]


class FacadeError(Failure):
    """An answer other than success: ``message``, then the ``reason`` (its status and
    retriability come from the table); ``allow``: a 405's allowed methods (its ``Allow``
    header, RFC 9110)."""

    reason: Reason

    def __init__(
        self,
        message: str,
        *,
        reason: Reason,
        retry_after_s: float | None = None,
        allow: tuple[str, ...] = (),
    ) -> None:
        super().__init__(
            message,
            reason=reason,
            status=reason.status,
            retriable=reason.retriable,
            retry_after_s=retry_after_s,
        )
        self.allow = allow


def from_kube_error(e: KubeError, doing: str) -> FacadeError:
    """A facade error for an API-server failure while ``doing`` something."""
    if isinstance(e, TooManyRequests):
        return FacadeError(
            f"the API server is throttling us while {doing}; retry later",
            reason=Reason.CLUSTER_THROTTLED,
            retry_after_s=e.retry_after_s or 1.0,
        )
    if isinstance(e, TransportError | ServerError):
        return FacadeError(
            f"the API server failed while {doing}: {e}",
            reason=Reason.CLUSTER_UNAVAILABLE,
            retry_after_s=1.0,
        )
    return FacadeError(f"the API server refused {doing}: {e}", reason=Reason.CLUSTER_ERROR)


def error_response(exc: FacadeError) -> web.Response:
    headers = {REASON_HEADER: exc.reason.value}
    if exc.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
    if exc.allow:
        headers["Allow"] = ", ".join(exc.allow)
    return web.Response(
        status=exc.status,
        body=encode_error(exc.reason, exc.message),
        content_type="application/json",
        charset="utf-8",
        headers=headers,
    )
