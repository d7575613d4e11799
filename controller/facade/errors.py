"""Typed, machine-readable failures of the facade (HTTP status + stable ``reason``).

The same body shape as the sandbox daemon's errors (``{"error": {"reason", "message"}}``), so a
trainer handles one format whether a failure came from the facade or from inside a sandbox.
"""

from __future__ import annotations

import json

from aiohttp import web

__all__ = ["FacadeError", "error_response"]


class FacadeError(Exception):
    def __init__(
        self, status: int, reason: str, message: str, *, retry_after_s: float | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after_s = retry_after_s


def error_response(exc: FacadeError) -> web.Response:
    headers = {}
    if exc.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
    body = json.dumps({"error": {"reason": exc.reason, "message": exc.message}})
    return web.Response(
        status=exc.status, text=body, content_type="application/json", headers=headers
    )
