"""Errors of the simulated API server, each mapping to a real Kubernetes ``Status`` object.

Real clients branch on ``status.reason`` and the HTTP code (kr8s on the code, client-go on the
reason), so every failure the server can produce is one of these classes, and its
``to_status`` renders exactly the ``kind: Status`` body the real kube-apiserver sends — key
for key in the order upstream's Go struct encodes them (``kind, apiVersion, metadata, status,
message, reason, details{name, group, kind, uid, causes[{reason, message, field}],
retryAfterSeconds}, code``), empty ``omitempty`` fields left out, so a client or test that
compares the text sees upstream's bytes (``tests/simcluster/golden/status_bodies.json``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DETAIL_KEYS",
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


#: ``StatusDetails``' fields in upstream's encoding order; ``retryAfterSeconds`` comes from
#: ``ApiError.retry_after``, the others from ``details``
DETAIL_KEYS = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
_CAUSE_KEYS = ("reason", "message", "field")


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
        unknown = set(details or ()) - set(DETAIL_KEYS[:-1])
        if unknown:
            raise ValueError(f"not StatusDetails fields: {sorted(unknown)}; known: {DETAIL_KEYS}")
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
        }
        if self.message:
            status["message"] = self.message
        status["reason"] = self.reason
        if self.details is not None or self.retry_after is not None:
            # a details pointer upstream sets is encoded even when all its fields are empty
            status["details"] = _ordered_details(self.details or {}, self.retry_after)
        status["code"] = self.code
        return status


def _ordered_details(given: dict[str, Any], retry_after: int | None) -> dict[str, Any]:
    """``given`` in upstream's field order, empty fields left out (``omitempty``)."""
    values = {**given, "retryAfterSeconds": retry_after}
    if values.get("causes"):
        values["causes"] = [
            {k: cause[k] for k in _CAUSE_KEYS if cause.get(k)} for cause in values["causes"]
        ]
    return {k: values[k] for k in DETAIL_KEYS if values.get(k)}


def _details(kind: str, name: str, group: str) -> dict[str, Any]:
    return {"name": name, "group": group, "kind": kind}


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
        """Upstream's ``NewForbidden``: the object named only when there is a name."""
        subject = f'{_qualified(resource, group)} "{name}"' if name else _qualified(resource, group)
        return cls(f"{subject} is forbidden: {why}", details=_details(resource, name, group))


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
    """429. ``flow_schema``/``priority_level``: the API Priority and Fairness names that
    rejected the request, for the server's own metrics; not in the body (upstream's Status
    carries only retryAfterSeconds)."""

    code = 429
    reason = "TooManyRequests"

    def __init__(
        self,
        message: str,
        *,
        retry_after: int | None = None,
        flow_schema: str = "",
        priority_level: str = "",
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.flow_schema = flow_schema
        self.priority_level = priority_level


class InternalError(ApiError):
    code = 500
    reason = "InternalError"

    @classmethod
    def occurred(cls, why: str) -> InternalError:
        """Upstream's ``NewInternalError``: the message prefixed, the error as its one cause."""
        return cls(f"Internal error occurred: {why}", details={"causes": [{"message": why}]})


class Timeout(ApiError):
    code = 504
    reason = "Timeout"
