"""The daemon's API surface as data: one row per operation.

The server builds its router from this table and ``openapi.py`` builds the OpenAPI document
from it, so the published contract and the served routes cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sandman.wire import daemon as m

__all__ = ["ROUTES", "Route"]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: str
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


def _with_common_errors(routes: tuple[Route, ...]) -> tuple[Route, ...]:
    """Each route's own error statuses plus those any call may meet (and 413 where there is
    a body): the document must declare every status the daemon can answer."""

    def widened(route: Route) -> Route:
        body = route.request is not None or route.request_content != "application/json"
        errors = {*route.errors, *ANY_REQUEST, *((413,) if body else ())}
        return replace(route, errors=tuple(sorted(errors)))

    return tuple(widened(route) for route in routes)


ROUTES: tuple[Route, ...] = (
    Route(
        "GET", "/v1/info", "_info", "Version, uptime, cgroup limits and usage", None, m.DaemonInfo
    ),
    Route(
        "POST",
        "/v1/exec",
        "_exec",
        "Run a command to completion",
        m.ExecRequest,
        m.ExecResult,
        errors=(400, 401, 409, 413, 429),
    ),
    Route(
        "POST",
        "/v1/exec/stream",
        "_exec_stream",
        "Run a command, streaming output as NDJSON ExecEvent lines",
        m.ExecRequest,
        m.ExecEvent,
        query=("resume_from",),
        response_content="application/x-ndjson",
        errors=(400, 401, 404, 409, 413, 429),
    ),
    Route(
        "POST",
        "/v1/exec/{id}/signal",
        "_exec_signal",
        "Signal a running exec's process group (interrupt)",
        m.SignalRequest,
        None,
        errors=(400, 401, 404),
    ),
    Route("GET", "/v1/sessions", "_session_list", "List shell sessions", None, m.SessionList),
    Route(
        "POST",
        "/v1/sessions",
        "_session_create",
        "Start a named persistent shell session",
        m.SessionCreateRequest,
        m.SessionInfo,
        201,
        errors=(400, 401, 409, 429, 503),
    ),
    Route(
        "POST",
        "/v1/sessions/{name}/run",
        "_session_run",
        "Run a command in a session",
        m.SessionRunRequest,
        m.SessionRunResult,
        errors=(400, 401, 404, 409, 429, 503),
    ),
    Route(
        "DELETE",
        "/v1/sessions/{name}",
        "_session_close",
        "Close a session",
        None,
        None,
        204,
        errors=(401, 404),
    ),
    Route(
        "GET", "/v1/processes", "_process_list", "List background processes", None, m.ProcessList
    ),
    Route(
        "POST",
        "/v1/processes",
        "_process_start",
        "Start a background process",
        m.ProcessStartRequest,
        m.ProcessInfo,
        201,
        errors=(400, 401, 429),
    ),
    Route(
        "GET",
        "/v1/processes/{id}",
        "_process_get",
        "Status of a background process",
        None,
        m.ProcessInfo,
        errors=(401, 404),
    ),
    Route(
        "GET",
        "/v1/processes/{id}/output",
        "_process_output",
        "Tail of a background process's output",
        None,
        m.ProcessOutput,
        query=("tail_bytes",),
        errors=(400, 401, 404),
    ),
    Route(
        "POST",
        "/v1/processes/{id}/signal",
        "_process_signal",
        "Signal a background process",
        m.SignalRequest,
        m.ProcessInfo,
        errors=(400, 401, 404),
    ),
    Route(
        "POST",
        "/v1/processes/{id}/wait",
        "_process_wait",
        "Wait (bounded) for a background process to exit",
        m.ProcessWaitRequest,
        m.ProcessInfo,
        errors=(400, 401, 404),
    ),
    Route(
        "DELETE",
        "/v1/processes/{id}",
        "_process_remove",
        "Stop (TERM, then KILL) and forget a background process",
        None,
        m.ProcessInfo,
        errors=(401, 404),
    ),
    Route(
        "GET",
        "/v1/files",
        "_file_read",
        "Read a file (optionally a byte range)",
        None,
        None,
        query=("path", "offset", "length"),
        response_content="application/octet-stream",
        errors=FILE_ERRORS,
    ),
    Route(
        "PUT",
        "/v1/files",
        "_file_write",
        "Write a file atomically (temp file + rename)",
        None,
        m.FileStat,
        query=("path", "mode", "parents"),
        request_content="application/octet-stream",
        errors=(*FILE_ERRORS, 409, 507),
    ),
    Route(
        "DELETE",
        "/v1/files",
        "_file_remove",
        "Remove a file or directory",
        None,
        None,
        204,
        query=("path", "recursive"),
        errors=(*FILE_ERRORS, 409),
    ),
    Route(
        "GET",
        "/v1/files/stat",
        "_file_stat",
        "Stat a path (symlinks not followed)",
        None,
        m.FileStat,
        query=("path",),
        errors=FILE_ERRORS,
    ),
    Route(
        "GET",
        "/v1/files/list",
        "_file_list",
        "List a directory",
        None,
        m.DirListing,
        query=("path",),
        errors=FILE_ERRORS,
    ),
    Route(
        "POST",
        "/v1/files/move",
        "_file_move",
        "Move or rename",
        m.MoveRequest,
        m.FileStat,
        errors=(*FILE_ERRORS, 409, 507),
    ),
    Route(
        "GET",
        "/v1/files/archive",
        "_archive_download",
        "Download a directory's contents as a tar stream",
        None,
        None,
        query=("path",),
        response_content="application/x-tar",
        errors=FILE_ERRORS,
    ),
    Route(
        "PUT",
        "/v1/files/archive",
        "_archive_upload",
        "Extract a tar stream into a directory (never outside it)",
        None,
        m.DirListing,
        query=("path",),
        request_content="application/x-tar",
        errors=(*FILE_ERRORS, 409, 507),
    ),
)
ROUTES = _with_common_errors(ROUTES)
