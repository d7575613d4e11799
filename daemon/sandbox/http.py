"""A minimal HTTP/1.1 server for the sandbox daemon, built on asyncio streams and h11.

Why not aiohttp (which the facade and simcluster use): the daemon runs inside *every* sandbox,
so its idle footprint is multiplied by ten thousand. Importing aiohttp's server costs ~15 MiB
of RSS on top of the interpreter; h11 is a small, well-kept HTTP/1.1 state machine that does
the protocol work (parsing, framing, chunked encoding, keep-alive rules). This module adds only
what a small JSON API needs on top: routing by method and path template, bounded body reads,
and streaming responses with backpressure.

Connections are a bounded resource (``ConnectionLimits``). Idle clients once exhausted the
daemon's descriptors and its readiness probe failed; a client dribbling its head held a
connection forever. So: at most ``max_connections`` at once, and a connection arriving at the
cap evicts the longest-idle one (idle between requests, or still sending its head), which
keeps ``/healthz`` answering however many idle clients there are; when every connection is
busy with a request, the newcomer gets one answer (``/healthz``, or a 503) and is closed.
Deadlines: a new connection's first head within ``header_timeout_s``; between requests a
keep-alive connection may idle ``keepalive_timeout_s`` (long: an agent thinks between tool
calls and its pooled connection must still be there), then its next head gets
``header_timeout_s`` from its first byte; a request body may pause at most
``body_timeout_s`` between reads; a response write may stall ``send_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, unquote_to_bytes

import h11
import msgspec

from .errors import (
    BadRequest,
    DaemonError,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    Unavailable,
)
from .streams import close_stream

__all__ = ["ConnectionLimits", "HttpServer", "Request", "Response", "Router", "parse_query"]

log = logging.getLogger("sandman.daemon.http")

READ_CHUNK = 64 * 1024
MAX_HEADER_BYTES = 32 * 1024
DRAIN_LIMIT = 1024 * 1024  # unread request body we are willing to discard to keep a connection
LINGER_S = 2.0  # ... and, closing, to let a client finish sending so it reads our answer
LINGER_BYTES = 64 * 1024 * 1024

Handler = Callable[["Request"], Awaitable["Response"]]


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Caps and deadlines of client connections (defaults: ``DaemonSettings``)."""

    max_connections: int
    keepalive_timeout_s: float
    header_timeout_s: float
    body_timeout_s: float
    send_timeout_s: float


class _HeadTimeout(Exception):
    """The next request's head did not arrive in time (``partial``: some of it did)."""

    def __init__(self, partial: bool) -> None:
        super().__init__("request head timed out")
        self.partial = partial


@dataclass(slots=True)
class Response:
    """A response: a complete body (bytes) or an async iterator of chunks (streamed, chunked)."""

    status: int = 200
    body: bytes | AsyncIterator[bytes] = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


class _Channel:
    """One client connection: the h11 state machine, its stream pair and its deadlines."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limits: ConnectionLimits
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.limits = limits
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.requests = 0
        self.busy = False  # a request is being read, handled or answered: not evictable
        self.idle_since = time.monotonic()
        self.evicted = False

    async def _receive(self, timeout_s: float) -> int:
        """Feed h11 what arrives within ``timeout_s`` (TimeoutError otherwise)."""
        async with asyncio.timeout(max(timeout_s, 0.0)):
            data = await self.reader.read(READ_CHUNK)
        self.conn.receive_data(data)
        return len(data)

    async def next_request(self) -> object:
        """The next request's head (or ConnectionClosed), within the deadlines."""
        first_wait = (
            self.limits.keepalive_timeout_s if self.requests else self.limits.header_timeout_s
        )
        deadline: float | None = None
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            partial = bool(self.conn.trailing_data[0]) or deadline is not None
            if partial and deadline is None:
                deadline = time.monotonic() + self.limits.header_timeout_s
            wait = deadline - time.monotonic() if deadline is not None else first_wait
            try:
                received = await self._receive(wait)
            except TimeoutError:
                raise _HeadTimeout(partial) from None
            if received and deadline is None:
                deadline = time.monotonic() + self.limits.header_timeout_s

    async def next_body_event(self) -> object:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                await self._receive(self.limits.body_timeout_s)
            except TimeoutError:
                raise RequestTimeout(
                    f"no request body data for {self.limits.body_timeout_s} s",
                    reason="body_timeout",
                ) from None

    async def send(self, event: h11.Event) -> None:
        data = self.conn.send(event)
        if data:
            await self.write(data)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        try:
            async with asyncio.timeout(self.limits.send_timeout_s):
                await self.writer.drain()
        except TimeoutError:
            raise ConnectionResetError("the client stopped reading the response") from None

    def evict(self) -> None:
        self.evicted = True
        self.writer.transport.abort()


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    channel: _Channel
    path_params: dict[str, str] = field(default_factory=dict)
    _body_done: bool = False

    async def body_chunks(self, limit: int) -> AsyncIterator[bytes]:
        """Yield the request body as it arrives; raise ``PayloadTooLarge`` past ``limit``."""
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"request body of {declared} bytes exceeds the {limit}-byte cap")
        received = 0
        while not self._body_done:
            try:
                event = await self.channel.next_body_event()
            except h11.RemoteProtocolError as exc:
                raise BadRequest(
                    f"incomplete request body: {exc}", reason="incomplete_body"
                ) from exc
            if isinstance(event, h11.Data):
                received += len(event.data)
                if received > limit:
                    raise PayloadTooLarge(f"request body exceeds the {limit}-byte cap")
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._body_done = True
            else:
                raise BadRequest("connection closed while reading the request body")

    async def read_body(self, limit: int) -> bytes:
        parts = [chunk async for chunk in self.body_chunks(limit)]
        return b"".join(parts)


class Router:
    """Method + path-template routing: ``/v1/sessions/{name}/run``."""

    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []

    def add(self, method: str, template: str, handler: Handler) -> None:
        pattern = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template)
        self._routes.append((method, re.compile(f"^{pattern}$"), handler))

    def resolve(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        allowed = False
        for route_method, pattern, handler in self._routes:
            match = pattern.match(path)
            if match is None:
                continue
            if route_method == method:
                return handler, {k: unquote(v) for k, v in match.groupdict().items()}
            allowed = True
        if allowed:
            raise DaemonError(f"{method} is not allowed on {path}", reason="method_not_allowed")
        raise NotFound(f"no such endpoint: {path}", reason="no_such_endpoint")


def _error_body(exc: DaemonError) -> bytes:
    # A message may quote a client's path that is not UTF-8: escape, never fail, here.
    message = exc.message.encode("utf-8", "backslashreplace").decode("utf-8")
    return msgspec.json.encode({"error": {"reason": exc.reason, "message": message}})


def _path_text(raw: bytes) -> str:
    """Percent-decoded bytes as text, bytes that are not UTF-8 kept as surrogate escapes
    (the ``os.fsdecode`` convention, so they reach the file system unchanged)."""
    return unquote_to_bytes(raw.split(b"#", 1)[0]).decode("utf-8", "surrogateescape")


def parse_query(raw: bytes) -> dict[str, str]:
    """``a=1&b=%FF`` -> ``{"a": "1", "b": "\\udcff"}``: lossless for any byte (a path may be
    any bytes a file system accepts); ``+`` is a space; the last of repeated names wins."""
    query: dict[str, str] = {}
    for pair in raw.split(b"#", 1)[0].split(b"&"):
        if not pair:
            continue
        name, _, value = pair.replace(b"+", b" ").partition(b"=")
        query[_path_text(name)] = _path_text(value)
    return query


async def _linger(channel: _Channel) -> None:
    """Before closing on a client still sending a body we answered early (an upload refused
    at its first member), read and drop a bounded amount of it: closing at once resets the
    connection, and a client busy writing its body then never reads the answer."""
    with contextlib.suppress(Exception):
        if channel.writer.can_write_eof():
            channel.writer.write_eof()
        received = 0
        async with asyncio.timeout(LINGER_S):
            while received < LINGER_BYTES and (data := await channel.reader.read(READ_CHUNK)):
                received += len(data)


class HttpServer:
    """Serve ``app`` (a Request -> Response coroutine) on one TCP listener."""

    def __init__(self, app: Handler, limits: ConnectionLimits) -> None:
        self._app = app
        self._limits = limits
        self._listener: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # one per connection, from its accept
        self._connections: dict[asyncio.Task[None], _Channel] = {}  # once its streams exist

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
        channel = _Channel(reader, writer, self._limits)
        self._connections[task] = channel
        try:
            await self._serve_requests(channel, overflow)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except _HeadTimeout as exc:
            if exc.partial:
                await self._reply_error(
                    channel,
                    408,
                    _error_body(
                        RequestTimeout("request head not received in time", reason="header_timeout")
                    ),
                )
        except h11.RemoteProtocolError as exc:
            body = _error_body(BadRequest(f"malformed HTTP request: {exc}", reason="bad_http"))
            await self._reply_error(channel, exc.error_status_hint, body)
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_requests(self, channel: _Channel, overflow: bool) -> None:
        while True:
            event = await channel.next_request()
            if not isinstance(event, h11.Request):
                return  # ConnectionClosed (or a stray event): done with this client
            channel.busy = True
            request = self._make_request(channel, event)
            response = await self._answer(request, overflow)
            try:
                await self._send_response(channel, response)
            finally:  # a streamed body holds resources until closed, even if never sent
                await close_stream(response.body)
            if overflow or not await self._finish_cycle(channel, request):
                return
            channel.requests += 1
            channel.busy = False
            channel.idle_since = time.monotonic()

    async def _answer(self, request: Request, overflow: bool) -> Response:
        if not overflow or request.path == "/healthz":
            return await self._dispatch(request)
        busy = Unavailable(
            f"all {self._limits.max_connections} connections are busy",
            reason="too_many_connections",
        )
        return Response(busy.status, _error_body(busy), headers=[("connection", "close")])

    @staticmethod
    def _make_request(channel: _Channel, event: h11.Request) -> Request:
        path, _, query = bytes(event.target).partition(b"?")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        return Request(
            event.method.decode(), _path_text(path), parse_query(query), headers, channel
        )

    async def _dispatch(self, request: Request) -> Response:
        try:
            return await self._app(request)
        except DaemonError as exc:
            headers = exc.headers()
            status = 405 if exc.reason == "method_not_allowed" else exc.status
            return Response(status, _error_body(exc), headers=headers)
        except Exception as exc:  # a bug: answer 500, keep serving, keep the trace in the log
            log.exception("unhandled error serving %s %s", request.method, request.path)
            return Response(500, _error_body(DaemonError(f"internal error: {exc!r}")))

    async def _send_response(self, channel: _Channel, response: Response) -> None:
        headers = [("content-type", response.content_type), *response.headers]
        if isinstance(response.body, bytes):
            # One write for head, body and end: fewer syscalls and segments per call.
            headers.append(("content-length", str(len(response.body))))
            conn = channel.conn
            data = conn.send(h11.Response(status_code=response.status, headers=headers)) or b""
            if response.body:
                data += conn.send(h11.Data(data=response.body)) or b""
            data += conn.send(h11.EndOfMessage()) or b""
            await channel.write(data)
            return
        await channel.send(h11.Response(status_code=response.status, headers=headers))
        await self._stream_body(channel, response.body)
        await channel.send(h11.EndOfMessage())

    @staticmethod
    async def _stream_body(channel: _Channel, stream: AsyncIterator[bytes]) -> None:
        """Send chunks as they come while watching the socket: a client that hangs up stops
        the stream (and so, e.g., the command behind it) instead of leaving it running until
        its next chunk fails to send."""
        chunks = stream.__aiter__()
        hangup = asyncio.ensure_future(channel.reader.read(READ_CHUNK))
        try:
            while True:
                following = asyncio.ensure_future(chunks.__anext__())
                await asyncio.wait({following, hangup}, return_when=asyncio.FIRST_COMPLETED)
                if not following.done():
                    data = hangup.result()
                    if not data:
                        following.cancel()
                        await asyncio.gather(following, return_exceptions=True)
                        raise ConnectionResetError("client closed the connection mid-stream")
                    channel.conn.receive_data(data)  # a pipelined request: keep it for later
                    hangup = asyncio.ensure_future(channel.reader.read(READ_CHUNK))
                    await asyncio.wait({following})
                try:
                    chunk = following.result()
                except StopAsyncIteration:
                    return
                if chunk:
                    await channel.send(h11.Data(data=chunk))
        finally:
            hangup.cancel()
            await asyncio.gather(hangup, return_exceptions=True)
            await close_stream(stream)

    @staticmethod
    async def _finish_cycle(channel: _Channel, request: Request) -> bool:
        """Discard any unread body so the connection can be reused; False means close it."""
        conn = channel.conn
        if conn.their_state is h11.SEND_BODY:
            try:
                async for _ in request.body_chunks(DRAIN_LIMIT):
                    pass
            except DaemonError:
                await _linger(channel)
                return False
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            return True
        return False

    @staticmethod
    async def _reply_error(channel: _Channel, status: int, body: bytes) -> None:
        """An error answer before (or instead of) a request: raw bytes, then close."""
        if channel.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        phrase = {
            400: "Bad Request",
            408: "Request Timeout",
            431: "Request Header Fields Too Large",
        }
        head = (
            f"HTTP/1.1 {status} {phrase.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        with contextlib.suppress(Exception):
            await channel.write(head.encode() + body)
