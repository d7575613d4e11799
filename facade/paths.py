"""Which daemon operation a proxied tool call names, decided on one canonical path.

A tool call ``/v1/sandboxes/{id}/<tail>`` is forwarded to the daemon's ``/v1/<tail>``. The
check that ``<tail>`` is a daemon operation the facade offers must be made on the path the
daemon will act on, not on the text the trainer sent: dot-segments (``files/../../healthz``),
their percent-encodings (``%2e%2e``, ``.%2E``), encoded or doubled slashes (``%2F``, ``//``),
backslashes and double encodings (``%252e``) are each read differently by someone on the way —
aiohttp's router leaves them alone, the client's URL parser (yarl) resolves dot-segments, the
daemon decodes once and then again for path parameters. So the facade does not normalise and
hope: it decodes each segment of the raw path once and accepts only segments that every one
of those readers sees the same way — unreserved characters (RFC 3986 ``[A-Za-z0-9._~-]``),
never empty, ``.`` or ``..`` — then matches the canonical path against the daemon's route
table (daemon/sandbox/api.py) for the prefixes in ``PROXIED``. Everything else is refused
before any byte reaches a sandbox.

Forwarded ports (``/v1/sandboxes/{id}/ports/{port}/<rest>``) are not daemon operations: their
``<rest>`` is a path of the sandbox's own server, so it may hold what a tool-call segment may
not (spaces, ``%2F``...). They follow the rule both hops share (daemon/sandbox/port_paths.py):
a port of 1-65535 that is not the daemon's, no dot-segment, no encoded slash or backslash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from yarl import URL

from daemon.sandbox.api import ROUTES as DAEMON_ROUTES
from daemon.sandbox.port_paths import PortPathError, PortTarget, split_port
from sandman.wire.errors import Reason

from .errors import FacadeError
from .routes import PROXIED

__all__ = [
    "OPERATIONS",
    "PORT_HTTP",
    "PORT_WEBSOCKET",
    "PortCall",
    "ProxiedCall",
    "port_call",
    "proxied_call",
]

#: The audit log's (and fair sharing's) operation names of forwarded ports.
PORT_HTTP = "port_http"
PORT_WEBSOCKET = "port_websocket"
#: What the shared port rule (daemon/sandbox/port_paths.py) refuses with, here as there.
PORT_REASONS = (Reason.INVALID_PORT, Reason.PORT_RESERVED, Reason.INVALID_PATH)

PREFIX = ("v1", "sandboxes")
_SEGMENT = re.compile(r"[A-Za-z0-9._~-]+")
_PARAMETER = re.compile(r"\{\w+\}")


@dataclass(frozen=True, slots=True)
class ProxiedCall:
    sandbox_id: str
    #: The daemon path: ``/v1/`` + canonical segments, safe to send as it is (nothing to
    #: encode, nothing any reader would normalise).
    path: str
    #: The daemon route's operation name (``exec``, ``exec_stream``...): what the audit log
    #: records and what fair sharing counts a call as (facade/fairness.py).
    operation: str = ""


def _template(path: str) -> re.Pattern[str]:
    return re.compile("/".join(_PARAMETER.sub("[^/]+", part) for part in path.split("/")))


#: (method, path pattern, operation) of every daemon operation under a proxied prefix.
OPERATIONS: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (route.method, _template(route.path), route.operation)
    for route in DAEMON_ROUTES
    if route.path.split("/")[2] in PROXIED
)


def proxied_call(method: str, raw_path: str) -> ProxiedCall:
    """The daemon call for ``method raw_path`` (the request's raw, still encoded path).

    Raises FacadeError: 400 ``invalid_path`` for a segment outside the rule, 404 ``not_found``
    for no daemon operation, 405 ``method_not_allowed`` (with ``allow``) for another method.
    """
    raw = raw_path.split("?", 1)[0].split("/")
    if raw[:1] != [""] or tuple(raw[1:3]) != PREFIX or len(raw) < 5:
        raise FacadeError(f"no tool call at {raw_path!r}", reason=Reason.NOT_FOUND)
    segments = [unquote(s, errors="replace") for s in raw[3:]]
    for segment in segments:
        if not _SEGMENT.fullmatch(segment) or segment in (".", ".."):
            raise FacadeError(
                "path segments must be non-empty, not `.` or `..`, and only [A-Za-z0-9._~-] "
                f"(percent-decoded once): {raw_path!r}",
                reason=Reason.INVALID_PATH,
            )
    path = "/v1/" + "/".join(segments[1:])
    matches = {m: op for m, pattern, op in OPERATIONS if pattern.fullmatch(path)}
    allowed = sorted(matches)
    if not allowed:
        raise FacadeError(f"no sandbox operation at {path!r}", reason=Reason.NOT_FOUND)
    if method not in allowed:
        raise FacadeError(
            f"{method} is not allowed on {path}",
            reason=Reason.METHOD_NOT_ALLOWED,
            allow=tuple(allowed),
        )
    return ProxiedCall(sandbox_id=segments[0], path=path, operation=matches[method])


@dataclass(frozen=True, slots=True)
class PortCall:
    sandbox_id: str
    target: PortTarget


def port_call(url: URL, *, reserved: int) -> PortCall:
    """The forwarded port of ``url`` (``/v1/sandboxes/{id}/ports/<tail>``, raw).

    Raises FacadeError: 400 ``invalid_path`` (the sandbox id outside the segment rule, or
    ``<rest>`` outside port_paths.py's), ``invalid_port``, ``port_reserved``."""
    raw = url.raw_path.split("/", 5)
    if len(raw) < 5 or raw[4] != "ports":
        raise FacadeError(f"no forwarded port at {url.raw_path!r}", reason=Reason.NOT_FOUND)
    sandbox_id = unquote(raw[3], errors="replace")
    if not _SEGMENT.fullmatch(sandbox_id) or sandbox_id in (".", ".."):
        raise FacadeError(f"not a sandbox id: {raw[3]!r}", reason=Reason.INVALID_PATH)
    tail = raw[5] if len(raw) > 5 else ""
    query = url.raw_query_string
    try:
        target = split_port(tail + (f"?{query}" if query else ""), reserved=reserved)
    except PortPathError as exc:
        reason = next(r for r in PORT_REASONS if r is exc.reason)  # only these, by name
        raise FacadeError(exc.message, reason=reason) from None
    return PortCall(sandbox_id, target)
