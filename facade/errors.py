"""Typed, machine-readable failures of the facade (HTTP status + stable ``reason``).

The same body shape as the sandbox daemon's errors (``{"error": {"reason", "message"}}``), so a
trainer handles one format whether a failure came from the facade or from inside a sandbox.
Failures of the API server behind the facade are translated, never passed through raw: a
throttled API server is a 429 with its Retry-After (the trainer should slow down), anything
else a 503 ``cluster_unavailable`` (retriable) with the cause chained for the logs.
"""

from __future__ import annotations

import json

from aiohttp import web

from kube import KubeError, TooManyRequests, TransportError
from kube.errors import ServerError

__all__ = ["FacadeError", "error_response", "from_kube_error"]


class FacadeError(Exception):
    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        retry_after_s: float | None = None,
        allow: tuple[str, ...] = (),
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after_s = retry_after_s
        #: A 405's methods that are allowed (its ``Allow`` header, RFC 9110).
        self.allow = allow


def from_kube_error(e: KubeError, doing: str) -> FacadeError:
    """A facade error for an API-server failure while ``doing`` something."""
    if isinstance(e, TooManyRequests):
        return FacadeError(
            429,
            "cluster_throttled",
            f"the API server is throttling us while {doing}; retry later",
            retry_after_s=e.retry_after or 1.0,
        )
    if isinstance(e, TransportError | ServerError):
        return FacadeError(
            503,
            "cluster_unavailable",
            f"the API server failed while {doing}: {e}",
            retry_after_s=1.0,
        )
    return FacadeError(502, "cluster_error", f"the API server refused {doing}: {e}")


def error_response(exc: FacadeError) -> web.Response:
    headers = {}
    if exc.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
    if exc.allow:
        headers["Allow"] = ", ".join(exc.allow)
    body = json.dumps({"error": {"reason": exc.reason, "message": exc.message}})
    return web.Response(
        status=exc.status, text=body, content_type="application/json", headers=headers
    )
