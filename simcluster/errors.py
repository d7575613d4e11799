"""Errors of the simulated API server, each mapping to a real Kubernetes ``Status`` object.

Real clients branch on ``status.reason`` and the HTTP code (kr8s on the code, client-go on the
reason), so every failure the server can produce is one of these classes, and its
``to_status`` renders exactly the ``kind: Status`` body the real kube-apiserver sends.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Expired",
    "Forbidden",
    "Gone",
    "InternalError",
    "Invalid",
    "MethodNotAllowed",
    "NotAcceptable",
    "NotFound",
    "RequestEntityTooLarge",
    "SimclusterError",
    "Timeout",
    "TooManyRequests",
    "Unauthorized",
    "UnsupportedMediaType",
]


class SimclusterError(Exception):
    """Root of every error raised by simcluster (configuration, runtime, API)."""


class ApiError(SimclusterError):
    """An API failure that is sent to the client as a ``Status`` object."""

    code = 500
    reason = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            status["details"] = details
        return status


def _details(kind: str, name: str, group: str) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "kind": kind}
    if group:
        d["group"] = group
    return d


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


class Unauthorized(ApiError):
    code = 401
    reason = "Unauthorized"


class Forbidden(ApiError):
    code = 403
    reason = "Forbidden"

    @classmethod
    def for_object(cls, resource: str, group: str, name: str, why: str) -> Forbidden:
        return cls(
            f'{_qualified(resource, group)} "{name}" is forbidden: {why}',
            details=_details(resource, name, group),
        )


class NotFound(ApiError):
    code = 404
    reason = "NotFound"

    @classmethod
    def for_object(cls, resource: str, group: str, name: str) -> NotFound:
        return cls(
            f'{_qualified(resource, group)} "{name}" not found',
            details=_details(resource, name, group),
        )


class MethodNotAllowed(ApiError):
    code = 405
    reason = "MethodNotAllowed"


class NotAcceptable(ApiError):
    code = 406
    reason = "NotAcceptable"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"

    @classmethod
    def for_object(cls, resource: str, group: str, name: str) -> AlreadyExists:
        return cls(
            f'{_qualified(resource, group)} "{name}" already exists',
            details=_details(resource, name, group),
        )


class Conflict(ApiError):
    code = 409
    reason = "Conflict"

    @classmethod
    def for_object(cls, resource: str, group: str, name: str, why: str) -> Conflict:
        return cls(
            f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
            details=_details(resource, name, group),
        )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


class Gone(ApiError):
    code = 410
    reason = "Gone"


class Expired(ApiError):
    """410 with reason Expired: a resourceVersion or continue token is too old; with
    ``continue_token``, the Status carries it in ``metadata.continue`` (upstream's hint to
    go on from the latest state)."""

    code = 410
    reason = "Expired"

    def __init__(self, message: str, *, continue_token: str | None = None) -> None:
        super().__init__(message)
        self.continue_token = continue_token

    def to_status(self) -> dict[str, Any]:
        status = super().to_status()
        if self.continue_token:
            status["metadata"] = {"continue": self.continue_token}
        return status


class RequestEntityTooLarge(ApiError):
    code = 413
    reason = "RequestEntityTooLarge"


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


class Invalid(ApiError):
    code = 422
    reason = "Invalid"

    @classmethod
    def for_object(
        cls, kind: str, group: str, name: str, causes: list[tuple[str, str, str]]
    ) -> Invalid:
        """``causes`` are (reason, field, message) triples, e.g. ("FieldValueRequired", ...);
        the message is upstream's ``NewInvalid``: the group-qualified kind, and the causes
        as ``ErrorList.ToAggregate`` prints them (bracketed when more than one)."""
        texts = [f"{field}: {msg}" if field else msg for _, field, msg in causes]
        text = texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
        details = _details(kind, name, group)
        details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
        qualified = f"{kind}.{group}" if group else kind
        if not causes:
            return cls(f'{qualified} "{name}" is invalid', details=details)
        return cls(f'{qualified} "{name}" is invalid: {text}', details=details)


class TooManyRequests(ApiError):
    code = 429
    reason = "TooManyRequests"


class InternalError(ApiError):
    code = 500
    reason = "InternalError"


class Timeout(ApiError):
    code = 504
    reason = "Timeout"
