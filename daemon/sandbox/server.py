"""The sandbox daemon: the HTTP API of one sandbox, wired to its managers.

One ``SandboxDaemon`` per container. It authenticates every ``/v1`` call with the sandbox's
bearer token (digests compared in constant time, claim.py: a pool sandbox's token changes
at its claim), tracks activity for the idle timeout, and on shutdown
(SIGTERM, idle timeout) stops every process it started before returning, so the container
ends cleanly and the pod reports ``Succeeded``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import resource
import socket
import time
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

import msgspec

from sandman.wire.daemon import (
    ClaimRequest,
    DaemonInfo,
    ExecRequest,
    MoveRequest,
    ProcessList,
    ProcessStartRequest,
    ProcessWaitRequest,
    SessionCreateRequest,
    SessionList,
    SessionRunRequest,
    SignalRequest,
    encode,
)
from sandman.wire.errors import Reason

from . import __version__, api
from .claim import Credentials
from .errors import DaemonError
from .execution import ExecManager
from .files import FileService
from .http_connection import Channel, ConnectionLimits, Handler, Request, Response
from .http_server import HttpServer
from .ports import PortForwarder, is_port_request
from .processes import ProcessManager
from .routing import Router
from .sessions import SessionManager
from .settings import DaemonSettings, ExtractLimits
from .streams import GuardedStream
from .supervisor import Supervisor, parse_signal, sanitize_environment, scrub_environment_block
from .sysinfo import CgroupReader

__all__ = ["SandboxDaemon"]

log = logging.getLogger("sandman.daemon")
T = TypeVar("T")
NDJSON = "application/x-ndjson"
OCTETS = "application/octet-stream"


def _json(value: object, status: int = 200) -> Response:
    return Response(status, encode(value))


INT64_MAX = 2**63 - 1
DECIMAL = re.compile(r"-?[0-9]{1,19}")
OCTAL = re.compile(r"-?[0-7]{1,7}")


def _query_int(request: Request, name: str, default: int | None = None) -> int | None:
    """An integer query parameter: ASCII decimal digits (octal for ``mode``), within int64,
    else a 400 ``invalid_query``. Ranges (negative offsets, modes past 07777) are the
    operation's to refuse, with its own reason."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    octal = name == "mode"
    if (
        not (OCTAL if octal else DECIMAL).fullmatch(raw)
        or abs(int(raw, 8 if octal else 10)) > INT64_MAX
    ):
        kind = "an octal integer" if octal else "a decimal integer within int64"
        raise DaemonError(f"query parameter {name!r} must be {kind}", reason=Reason.INVALID_QUERY)
    return int(raw, 8 if octal else 10)


def _query_mode(request: Request) -> int | None:
    mode = _query_int(request, "mode")
    if mode is not None and not 0 <= mode <= 0o7777:
        raise DaemonError(f"mode {mode:o} is outside 0..7777 (octal)", reason=Reason.INVALID_MODE)
    return mode


def _query_bool(request: Request, name: str, default: bool = False) -> bool:
    raw = request.query.get(name)
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes", ""):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise DaemonError(f"query parameter {name!r} must be a boolean", reason=Reason.INVALID_QUERY)


def connection_limits(settings: DaemonSettings) -> ConnectionLimits:
    """The HTTP server's limits; the connection cap also fits the descriptors we may open
    (the soft RLIMIT_NOFILE is raised to the hard one first: commands need fds too)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return ConnectionLimits(
        max_connections=max(4, min(settings.max_connections, soft // 4)),
        keepalive_timeout_s=settings.keepalive_timeout_s,
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        send_timeout_s=settings.send_timeout_s,
    )


class SandboxDaemon:
    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        self.supervisor = Supervisor()
        self.execs = ExecManager(settings, self.supervisor)
        self.sessions = SessionManager(settings, self.supervisor)
        self.processes = ProcessManager(settings, self.supervisor)
        self.files = FileService(settings.workdir, settings.max_dir_entries)
        self.cgroups = CgroupReader()
        self.router = Router(api.bind(api.ROUTES, self.handlers()))
        limits = connection_limits(settings)
        self._http = HttpServer(self._handle, limits)
        self.ports = PortForwarder(limits, settings.host, settings.port)
        self.credentials = Credentials(settings.verifier(), pooled=settings.pooled)
        #: The idle timeout in force: the settings', or a pool sandbox's claim's.
        self.idle_timeout_s = settings.idle_timeout_s
        self._started = time.monotonic()
        self._last_activity = time.monotonic()
        self._in_flight = 0
        self.stopping = asyncio.Event()
        self.port: int | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(
        self, listener: socket.socket | None = None, adopted: Sequence[socket.socket] = ()
    ) -> int:
        """Serve on the settings' address, or on `listener` already bound to it with the
        connections `adopted` that were accepted on it during start-up (``early``)."""
        sanitize_environment(os.environ)
        scrub_environment_block()
        self.supervisor.install()
        self.port = await self._http.start(
            self.settings.host, self.settings.port, listener, adopted
        )
        self.ports.own_port = self.port
        return self.port

    async def serve_until_stopped(self) -> None:
        watchdog = asyncio.ensure_future(self._idle_watchdog())
        try:
            await self.stopping.wait()
        finally:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)
            await self.shutdown()

    async def shutdown(self) -> None:
        await self._http.close()
        await self.sessions.close_all()
        await self.processes.stop_all()
        await self.execs.stop_all()
        await self.supervisor.stop_all(self.settings.shutdown_grace_s)
        self.supervisor.uninstall()

    async def _idle_watchdog(self) -> None:
        while True:
            limit = self.idle_timeout_s  # a claim may set it
            await asyncio.sleep(1.0 if limit is None else min(1.0, limit / 4))
            if limit is not None and self._in_flight == 0 and self.idle_s() >= limit:
                log.info("idle for %.1f s (limit %.1f s): exiting", self.idle_s(), limit)
                self.stopping.set()
                return

    def idle_s(self) -> float:
        return 0.0 if self._in_flight else time.monotonic() - self._last_activity

    # -- request pipeline ------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        if request.path == "/healthz":
            return Response(200, b'{"status":"ok"}')
        self._authenticate(request)
        if is_port_request(request):
            return self._track_tunnel(await self.ports.open(request))
        handler, request.path_params = self.router.resolve(request.method, request.path)
        self._in_flight += 1
        try:
            response = await handler(request)
        finally:
            self._in_flight -= 1
            self._last_activity = time.monotonic()
        if not isinstance(response.body, bytes):
            response.body = self._track_stream(response.body)
        return response

    def _track_stream(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """A streamed response counts as activity until it is closed."""
        self._in_flight += 1
        return GuardedStream(body, self._stream_closed)

    def _track_tunnel(self, response: Response) -> Response:
        """A forwarded port's tunnel counts as activity while it is open (ports.py)."""
        tunnel = response.tunnel
        assert tunnel is not None

        async def tracked(channel: Channel) -> None:
            self._in_flight += 1
            try:
                await tunnel(channel)
            finally:
                self._stream_closed()

        response.tunnel = tracked
        return response

    def _stream_closed(self) -> None:
        self._in_flight -= 1
        self._last_activity = time.monotonic()

    def _authenticate(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise DaemonError("missing bearer token", reason=Reason.MISSING_TOKEN)
        claim_route = request.method == api.CLAIM.method and request.path == api.CLAIM.path
        self.credentials.check(token, claim_route=claim_route)

    async def _body(self, request: Request, model: type[T]) -> T:
        raw = await request.read_body(self.settings.max_json_body_bytes)
        try:
            return msgspec.json.decode(raw or b"{}", type=model)
        except msgspec.ValidationError as exc:
            raise DaemonError(str(exc), reason=Reason.INVALID_REQUEST) from exc
        except msgspec.DecodeError as exc:
            raise DaemonError(f"body is not valid JSON: {exc}", reason=Reason.INVALID_JSON) from exc

    def handlers(self) -> dict[api.Route, Handler]:
        """Every operation of the route table and the method that serves it."""
        return {
            api.INFO: self._info,
            api.CLAIM: self._claim,
            api.EXEC: self._exec,
            api.EXEC_STREAM: self._exec_stream,
            api.EXEC_SIGNAL: self._exec_signal,
            api.SESSION_LIST: self._session_list,
            api.SESSION_CREATE: self._session_create,
            api.SESSION_RUN: self._session_run,
            api.SESSION_CLOSE: self._session_close,
            api.PROCESS_LIST: self._process_list,
            api.PROCESS_START: self._process_start,
            api.PROCESS_GET: self._process_get,
            api.PROCESS_OUTPUT: self._process_output,
            api.PROCESS_SIGNAL: self._process_signal,
            api.PROCESS_WAIT: self._process_wait,
            api.PROCESS_REMOVE: self._process_remove,
            api.FILE_READ: self._file_read,
            api.FILE_WRITE: self._file_write,
            api.FILE_REMOVE: self._file_remove,
            api.FILE_STAT: self._file_stat,
            api.FILE_LIST: self._file_list,
            api.FILE_MOVE: self._file_move,
            api.ARCHIVE_DOWNLOAD: self._archive_download,
            api.ARCHIVE_UPLOAD: self._archive_upload,
        }

    # -- handlers: info and exec -----------------------------------------------------------

    async def _info(self, request: Request) -> Response:
        return _json(
            DaemonInfo(
                version=__version__,
                pid=os.getpid(),
                is_pid1=os.getpid() == 1,
                uptime_s=round(time.monotonic() - self._started, 3),
                idle_s=round(self.idle_s(), 3),
                idle_timeout_s=self.idle_timeout_s,
                running_execs=self.execs.running,
                sessions=len(self.sessions),
                processes=len(self.processes),
                orphans_reaped=self.supervisor.orphans_reaped,
                limits=self.cgroups.limits(),
                usage=self.cgroups.usage(),
            )
        )

    async def _claim(self, request: Request) -> Response:
        body = await self._body(request, ClaimRequest)
        if self.credentials.claim(body):
            self.idle_timeout_s = body.idle_timeout_s
            log.info("claimed by %s", body.claim)
        return Response(204)

    async def _exec(self, request: Request) -> Response:
        result = await self.execs.run(await self._body(request, ExecRequest))
        return _json(result)

    async def _exec_stream(self, request: Request) -> Response:
        body = await self._body(request, ExecRequest)
        stream = self.execs.stream(body, _query_int(request, "resume_from", 0) or 0)
        return Response(200, stream, content_type=NDJSON)

    async def _signal(self, request: Request) -> SignalRequest:
        body = await self._body(request, SignalRequest)
        try:
            parse_signal(body.signal)
        except (KeyError, ValueError) as exc:
            raise DaemonError(
                f"unknown signal {body.signal!r}", reason=Reason.INVALID_SIGNAL
            ) from exc
        return body

    async def _exec_signal(self, request: Request) -> Response:
        body = await self._signal(request)
        self.execs.signal(request.path_params["id"], parse_signal(body.signal))
        return _json({"id": request.path_params["id"], "signal": parse_signal(body.signal).name})

    # -- handlers: sessions ----------------------------------------------------------------

    async def _session_list(self, request: Request) -> Response:
        return _json(SessionList(sessions=self.sessions.list()))

    async def _session_create(self, request: Request) -> Response:
        info = await self.sessions.create(await self._body(request, SessionCreateRequest))
        return _json(info, 201)

    async def _session_run(self, request: Request) -> Response:
        body = await self._body(request, SessionRunRequest)
        with self.execs.slot():
            result = await self.sessions.run(request.path_params["name"], body)
        return _json(result)

    async def _session_close(self, request: Request) -> Response:
        await self.sessions.close(request.path_params["name"])
        return Response(204)

    # -- handlers: background processes ----------------------------------------------------

    async def _process_list(self, request: Request) -> Response:
        return _json(ProcessList(processes=self.processes.list()))

    async def _process_start(self, request: Request) -> Response:
        info = self.processes.start(await self._body(request, ProcessStartRequest))
        return _json(info, 201)

    async def _process_get(self, request: Request) -> Response:
        return _json(self.processes.get(request.path_params["id"]).info())

    async def _process_output(self, request: Request) -> Response:
        tail = _query_int(request, "tail_bytes")
        if tail is not None and tail < 0:
            raise DaemonError("tail_bytes must be >= 0", reason=Reason.INVALID_QUERY)
        return _json(self.processes.output(request.path_params["id"], tail))

    async def _process_signal(self, request: Request) -> Response:
        body = await self._signal(request)
        return _json(self.processes.signal(request.path_params["id"], parse_signal(body.signal)))

    async def _process_wait(self, request: Request) -> Response:
        body = await self._body(request, ProcessWaitRequest)
        return _json(await self.processes.wait(request.path_params["id"], body.timeout_s))

    async def _process_remove(self, request: Request) -> Response:
        return _json(await self.processes.remove(request.path_params["id"]))

    # -- handlers: files -------------------------------------------------------------------

    async def _file_read(self, request: Request) -> Response:
        offset = _query_int(request, "offset", 0) or 0
        count, chunks = self.files.open_read(
            request.query.get("path", ""), offset, _query_int(request, "length")
        )

        async def body() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        stream = GuardedStream(body(), chunks.close)  # the fd is closed even if never sent
        return Response(200, stream, OCTETS, [("x-sandman-bytes", str(count))])

    async def _file_write(self, request: Request) -> Response:
        chunks = request.body_chunks(self.settings.max_upload_bytes)
        stat = await self.files.write(
            request.query.get("path", ""),
            chunks,
            _query_mode(request),
            _query_bool(request, "parents", True),
        )
        return _json(stat)

    async def _file_remove(self, request: Request) -> Response:
        self.files.remove(request.query.get("path", ""), _query_bool(request, "recursive"))
        return Response(204)

    async def _file_stat(self, request: Request) -> Response:
        return _json(self.files.stat(request.query.get("path", "")))

    async def _file_list(self, request: Request) -> Response:
        return _json(self.files.list(request.query.get("path", "")))

    async def _file_move(self, request: Request) -> Response:
        return _json(self.files.move(await self._body(request, MoveRequest)))

    async def _archive_download(self, request: Request) -> Response:
        return Response(200, self.files.archive(request.query.get("path", "")), "application/x-tar")

    async def _archive_upload(self, request: Request) -> Response:
        chunks = request.body_chunks(self.settings.max_upload_bytes)
        limits = ExtractLimits(
            max_bytes=self.settings.max_extract_bytes,
            max_members=self.settings.max_archive_members,
        )
        return _json(await self.files.extract(request.query.get("path", ""), chunks, limits))
