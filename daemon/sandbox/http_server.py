"""A minimal HTTP/1.1 server for the sandbox daemon, built on asyncio streams and h11.

Why not aiohttp (which the facade and simcluster use): the daemon runs inside *every* sandbox,
so its idle footprint is multiplied by ten thousand. Importing aiohttp's server costs ~15 MiB
of RSS on top of the interpreter; h11 is a small, well-kept HTTP/1.1 state machine that does
the protocol work (parsing, framing, chunked encoding, keep-alive rules). What a small JSON
API needs on top is split by what it is about: this module holds the listener and which
connections are served, ``http_connection.py`` one connection (its deadlines, bounded body
reads, streamed responses with backpressure), ``routing.py`` which handler a request goes to.

Connections are a bounded resource (``ConnectionLimits``). Idle clients once exhausted the
daemon's descriptors and its readiness probe failed; a client dribbling its head held a
connection forever. So: at most ``max_connections`` at once, and a connection arriving at the
cap evicts the longest-idle one (idle between requests, or still sending its head), which
keeps ``/healthz`` answering however many idle clients there are; when every connection is
busy with a request, the newcomer gets one answer (``/healthz``, or a 503) and is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from collections.abc import Sequence

import h11

from sandman.wire.errors import Reason

from .errors import DaemonError
from .http_connection import (
    MAX_HEADER_BYTES,
    Channel,
    ConnectionLimits,
    Handler,
    HeadTimeout,
    Request,
    Response,
    error_body,
)
from .streams import close_stream

__all__ = ["HttpServer"]

log = logging.getLogger("sandman.daemon.http")


class HttpServer:
    """Serve ``app`` (a Request -> Response coroutine) on one TCP listener."""

    def __init__(self, app: Handler, limits: ConnectionLimits) -> None:
        self._app = app
        self._limits = limits
        self._listener: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # one per connection, from its accept
        self._connections: dict[asyncio.Task[None], Channel] = {}  # once its streams exist

    async def start(
        self,
        host: str,
        port: int,
        listener: socket.socket | None = None,
        adopted: Sequence[socket.socket] = (),
    ) -> int:
        """Listen on (host, port), or on `listener` if it is already bound there, and serve
        `adopted` first: connections accepted on it before this server ran, unread
        (``early.EarlyListener``). Returns the port."""
        if listener is None:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            listener = socket.create_server((host, port), family=family, backlog=128)
        self._listener = listener
        self._listener.setblocking(False)
        for sock in adopted:
            self._serve_accepted(sock)
        self._acceptor = asyncio.ensure_future(self._accept_loop(self._listener))
        return int(self._listener.getsockname()[1])

    async def close(self) -> None:
        if self._acceptor is not None:
            self._acceptor.cancel()
            await asyncio.gather(self._acceptor, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _accept_loop(self, listener: socket.socket) -> None:
        """One accept at a time, room made before the next: asyncio's own server accepts a
        whole backlog in one go, which ran the daemon out of descriptors before any cap could
        act. Out of descriptors anyway (commands hold fds too), an idle connection goes."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("accept failed: %s", exc)
                self._evict_idle()
                await asyncio.sleep(0.05)
                continue
            self._serve_accepted(sock)
            await asyncio.sleep(0)  # let an evicted connection close before the next accept

    def _serve_accepted(self, sock: socket.socket) -> None:
        overflow = not self._make_room()
        task = asyncio.ensure_future(self._serve_socket(sock, overflow))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_socket(self, sock: socket.socket, overflow: bool) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_HEADER_BYTES)
        except OSError:
            sock.close()
            return
        await self._serve(reader, writer, overflow)

    def _make_room(self) -> bool:
        """At the cap, evict the longest-idle connection; False if every one is busy."""
        if len(self._tasks) < self._limits.max_connections:
            return True
        return self._evict_idle()

    def _evict_idle(self) -> bool:
        idle = [c for c in self._connections.values() if not c.busy and not c.evicted]
        if not idle:
            return False
        min(idle, key=lambda c: c.idle_since).evict()
        return True

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, overflow: bool
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        channel = Channel(reader, writer, self._limits)
        self._connections[task] = channel
        try:
            await self._serve_requests(channel, overflow)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except HeadTimeout as exc:
            if exc.partial:
                late = "request head not received in time"
                await channel.reply_error(DaemonError(late, reason=Reason.HEADER_TIMEOUT))
        except h11.RemoteProtocolError as exc:
            await channel.reply_error(_malformed(exc))
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_requests(self, channel: Channel, overflow: bool) -> None:
        while True:
            event = await channel.next_request()
            if not isinstance(event, h11.Request):
                return  # ConnectionClosed (or a stray event): done with this client
            channel.busy = True
            request = channel.request(event)
            response = await self._answer(request, overflow)
            if response.tunnel is not None:  # the connection is the tunnel's now
                await response.tunnel(channel)
                return
            try:
                await channel.respond(response)
            finally:  # a streamed body holds resources until closed, even if never sent
                await close_stream(response.body)
            if overflow or not await channel.finish_cycle(request):
                return
            channel.requests += 1
            channel.busy = False
            channel.idle_since = time.monotonic()

    async def _answer(self, request: Request, overflow: bool) -> Response:
        if not overflow or request.path == "/healthz":
            return await self._dispatch(request)
        busy = DaemonError(
            f"all {self._limits.max_connections} connections are busy",
            reason=Reason.TOO_MANY_CONNECTIONS,
        )
        return Response(busy.status, error_body(busy), headers=[("connection", "close")])

    async def _dispatch(self, request: Request) -> Response:
        try:
            return await self._app(request)
        except DaemonError as exc:
            headers = exc.headers()
            return Response(exc.status, error_body(exc), headers=headers)
        except Exception as exc:  # a bug: answer 500, keep serving, keep the trace in the log
            log.exception("unhandled error serving %s %s", request.method, request.path)
            error = DaemonError(f"internal error: {exc!r}", reason=Reason.INTERNAL)
            return Response(error.status, error_body(error))


def _malformed(exc: h11.RemoteProtocolError) -> DaemonError:
    """h11's refusal of a request head: 431 for a head over its limit, else 400."""
    if exc.error_status_hint == 431:
        return DaemonError(f"request head too large: {exc}", reason=Reason.HEADERS_TOO_LARGE)
    return DaemonError(f"malformed HTTP request: {exc}", reason=Reason.BAD_HTTP)
