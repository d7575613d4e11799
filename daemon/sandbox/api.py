"""The daemon's API surface as data: one named row per operation.

The server serves every row (``server.py`` binds each to its handler, ``{api.EXEC:
self._exec, ...}``), ``openapi.py`` builds the OpenAPI document from the rows, and the facade
takes its proxy allow-list from them (``facade/paths.py``), so the published contract, the
served routes and what the facade forwards cannot drift apart. The rows are data the facade
imports, and it must never import the daemon's server: that is why a row names its handler
the other way round — the server's binding names the row — and :func:`bind` holds the two
together (every row exactly one handler, every handler one row), checked when the server
starts and by the tests.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from sandman.wire import daemon as m

__all__ = [
    "ARCHIVE_DOWNLOAD",
    "ARCHIVE_UPLOAD",
    "CLAIM",
    "EXEC",
    "EXEC_SIGNAL",
    "EXEC_STREAM",
    "FILE_LIST",
    "FILE_MOVE",
    "FILE_READ",
    "FILE_REMOVE",
    "FILE_STAT",
    "FILE_WRITE",
    "INFO",
    "PROCESS_GET",
    "PROCESS_LIST",
    "PROCESS_OUTPUT",
    "PROCESS_REMOVE",
    "PROCESS_SIGNAL",
    "PROCESS_START",
    "PROCESS_WAIT",
    "ROUTES",
    "SESSION_CLOSE",
    "SESSION_CREATE",
    "SESSION_LIST",
    "SESSION_RUN",
    "DaemonRoute",
    "Route",
    "bind",
]


@dataclass(frozen=True, slots=True)
class Route:
    """One operation of an HTTP API: what the router matches and the document describes.

    A route names no handler: the server that serves it binds it to one (:func:`bind`).
    """

    method: str
    path: str
    #: The OpenAPI ``operationId``.
    operation: str
    summary: str
    request: type | None = None
    response: type | None = None
    status: int = 200
    query: tuple[str, ...] = ()
    request_content: str = "application/json"
    response_content: str = "application/json"
    errors: tuple[int, ...] = field(default=(400, 401))


ANY_REQUEST = (401, 408, 503)
"""Any call may meet these: a missing or wrong token, a head or body that arrives too slowly,
every connection busy."""
FILE_ERRORS = (400, 403, 404)  # a bad or over-long path, permissions or a read-only fs, none


@dataclass(frozen=True, slots=True)
class DaemonRoute(Route):
    """A daemon operation: its error statuses are its own plus those any call may meet (and
    413 where there is a body), since the document must declare every status the daemon can
    answer."""

    def __post_init__(self) -> None:
        body = self.request is not None or self.request_content != "application/json"
        errors = {*self.errors, *ANY_REQUEST, *((413,) if body else ())}
        object.__setattr__(self, "errors", tuple(sorted(errors)))


R = TypeVar("R", bound=Route)
H = TypeVar("H", bound=Hashable)


def bind(routes: Sequence[R], handlers: Mapping[R, H]) -> list[tuple[R, H]]:
    """``routes`` in table order, each with its handler from ``handlers``.

    Raises ValueError, so a server that would answer 404 for one of its own operations (or
    keep a handler nothing reaches) never starts: a route without a handler, a handler for
    a route not in the table, one handler bound to two routes."""
    if missing := [r.operation for r in routes if r not in handlers]:
        raise ValueError(f"routes without a handler: {missing}")
    if unknown := [r.operation for r in handlers if r not in routes]:
        raise ValueError(f"handlers of no route: {unknown}")
    if len(set(handlers.values())) != len(handlers):
        raise ValueError("a handler is bound to more than one route")
    return [(route, handlers[route]) for route in routes]


INFO = DaemonRoute(
    "GET", "/v1/info", "info", "Version, uptime, cgroup limits and usage", None, m.DaemonInfo
)

CLAIM = DaemonRoute(
    "POST",
    "/v1/claim",
    "claim",
    "Claim a pool sandbox: its env, idle timeout and own token from now on (the facade's "
    "call, never proxied)",
    m.ClaimRequest,
    None,
    204,
    errors=(400, 401, 409),
)

EXEC = DaemonRoute(
    "POST",
    "/v1/exec",
    "exec",
    "Run a command to completion",
    m.ExecRequest,
    m.ExecResult,
    errors=(400, 401, 409, 413, 429),
)

EXEC_STREAM = DaemonRoute(
    "POST",
    "/v1/exec/stream",
    "exec_stream",
    "Run a command, streaming output as NDJSON ExecEvent lines",
    m.ExecRequest,
    m.ExecEvent,
    query=("resume_from",),
    response_content="application/x-ndjson",
    errors=(400, 401, 404, 409, 413, 429),
)

EXEC_SIGNAL = DaemonRoute(
    "POST",
    "/v1/exec/{id}/signal",
    "exec_signal",
    "Signal a running exec's process group (interrupt)",
    m.SignalRequest,
    None,
    errors=(400, 401, 404),
)

SESSION_LIST = DaemonRoute(
    "GET", "/v1/sessions", "session_list", "List shell sessions", None, m.SessionList
)

SESSION_CREATE = DaemonRoute(
    "POST",
    "/v1/sessions",
    "session_create",
    "Start a named persistent shell session",
    m.SessionCreateRequest,
    m.SessionInfo,
    201,
    errors=(400, 401, 409, 429, 503),
)

SESSION_RUN = DaemonRoute(
    "POST",
    "/v1/sessions/{name}/run",
    "session_run",
    "Run a command in a session",
    m.SessionRunRequest,
    m.SessionRunResult,
    errors=(400, 401, 404, 409, 429, 503),
)

SESSION_CLOSE = DaemonRoute(
    "DELETE",
    "/v1/sessions/{name}",
    "session_close",
    "Close a session",
    None,
    None,
    204,
    errors=(401, 404),
)

PROCESS_LIST = DaemonRoute(
    "GET", "/v1/processes", "process_list", "List background processes", None, m.ProcessList
)

PROCESS_START = DaemonRoute(
    "POST",
    "/v1/processes",
    "process_start",
    "Start a background process",
    m.ProcessStartRequest,
    m.ProcessInfo,
    201,
    errors=(400, 401, 429),
)

PROCESS_GET = DaemonRoute(
    "GET",
    "/v1/processes/{id}",
    "process_get",
    "Status of a background process",
    None,
    m.ProcessInfo,
    errors=(401, 404),
)

PROCESS_OUTPUT = DaemonRoute(
    "GET",
    "/v1/processes/{id}/output",
    "process_output",
    "Tail of a background process's output",
    None,
    m.ProcessOutput,
    query=("tail_bytes",),
    errors=(400, 401, 404),
)

PROCESS_SIGNAL = DaemonRoute(
    "POST",
    "/v1/processes/{id}/signal",
    "process_signal",
    "Signal a background process",
    m.SignalRequest,
    m.ProcessInfo,
    errors=(400, 401, 404),
)

PROCESS_WAIT = DaemonRoute(
    "POST",
    "/v1/processes/{id}/wait",
    "process_wait",
    "Wait (bounded) for a background process to exit",
    m.ProcessWaitRequest,
    m.ProcessInfo,
    errors=(400, 401, 404),
)

PROCESS_REMOVE = DaemonRoute(
    "DELETE",
    "/v1/processes/{id}",
    "process_remove",
    "Stop (TERM, then KILL) and forget a background process",
    None,
    m.ProcessInfo,
    errors=(401, 404),
)

FILE_READ = DaemonRoute(
    "GET",
    "/v1/files",
    "file_read",
    "Read a file (optionally a byte range)",
    None,
    None,
    query=("path", "offset", "length"),
    response_content="application/octet-stream",
    errors=FILE_ERRORS,
)

FILE_WRITE = DaemonRoute(
    "PUT",
    "/v1/files",
    "file_write",
    "Write a file atomically (temp file + rename)",
    None,
    m.FileStat,
    query=("path", "mode", "parents"),
    request_content="application/octet-stream",
    errors=(*FILE_ERRORS, 409, 507),
)

FILE_REMOVE = DaemonRoute(
    "DELETE",
    "/v1/files",
    "file_remove",
    "Remove a file or directory",
    None,
    None,
    204,
    query=("path", "recursive"),
    errors=(*FILE_ERRORS, 409),
)

FILE_STAT = DaemonRoute(
    "GET",
    "/v1/files/stat",
    "file_stat",
    "Stat a path (symlinks not followed)",
    None,
    m.FileStat,
    query=("path",),
    errors=FILE_ERRORS,
)

FILE_LIST = DaemonRoute(
    "GET",
    "/v1/files/list",
    "file_list",
    "List a directory",
    None,
    m.DirListing,
    query=("path",),
    errors=FILE_ERRORS,
)

FILE_MOVE = DaemonRoute(
    "POST",
    "/v1/files/move",
    "file_move",
    "Move or rename",
    m.MoveRequest,
    m.FileStat,
    errors=(*FILE_ERRORS, 409, 507),
)

ARCHIVE_DOWNLOAD = DaemonRoute(
    "GET",
    "/v1/files/archive",
    "archive_download",
    "Download a directory's contents as a tar stream",
    None,
    None,
    query=("path",),
    response_content="application/x-tar",
    errors=FILE_ERRORS,
)

ARCHIVE_UPLOAD = DaemonRoute(
    "PUT",
    "/v1/files/archive",
    "archive_upload",
    "Extract a tar stream into a directory (never outside it)",
    None,
    m.DirListing,
    query=("path",),
    request_content="application/x-tar",
    errors=(*FILE_ERRORS, 409, 507),
)

#: Every operation, in the order the router tries them and the document lists them.
ROUTES: tuple[DaemonRoute, ...] = (
    INFO,
    CLAIM,
    EXEC,
    EXEC_STREAM,
    EXEC_SIGNAL,
    SESSION_LIST,
    SESSION_CREATE,
    SESSION_RUN,
    SESSION_CLOSE,
    PROCESS_LIST,
    PROCESS_START,
    PROCESS_GET,
    PROCESS_OUTPUT,
    PROCESS_SIGNAL,
    PROCESS_WAIT,
    PROCESS_REMOVE,
    FILE_READ,
    FILE_WRITE,
    FILE_REMOVE,
    FILE_STAT,
    FILE_LIST,
    FILE_MOVE,
    ARCHIVE_DOWNLOAD,
    ARCHIVE_UPLOAD,
)
