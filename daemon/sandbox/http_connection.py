"""One client connection of the daemon's HTTP server: h11's state machine over a stream pair.

What a handler sees is built here — a :class:`Request` that reads its body as it arrives,
bounded, and the :class:`Response` it answers with — and what a connection owes its client
is done here: a head, a body or a stream written with backpressure, a pipelined request kept
for later, an unread body drained (or the connection closed), the raw error answer before a
request exists. The server (``http_server.py``) decides which connections it holds and
drives each one request after another; this module knows nothing of the others.

Deadlines are per connection (``ConnectionLimits``): a new connection's first head within
``header_timeout_s``; between requests a keep-alive connection may idle
``keepalive_timeout_s`` (long: an agent thinks between tool calls and its pooled connection
must still be there), then its next head gets ``header_timeout_s`` from its first byte; a
request body may pause at most ``body_timeout_s`` between reads; a response write may stall
``send_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import unquote_to_bytes

import h11

from sandman.wire.errors import Reason, encode_error

from .errors import DaemonError
from .streams import close_stream

__all__ = [
    "Channel",
    "ConnectionLimits",
    "Handler",
    "HeadTimeout",
    "Request",
    "Response",
    "Tunnel",
    "error_body",
    "parse_query",
]

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


class HeadTimeout(Exception):
    """The next request's head did not arrive in time (``partial``: some of it did)."""

    def __init__(self, partial: bool) -> None:
        super().__init__("request head timed out")
        self.partial = partial


Tunnel = Callable[["Channel"], Awaitable[None]]


@dataclass(slots=True)
class Response:
    """A response: a complete body (bytes) or an async iterator of chunks (streamed, chunked);
    or ``tunnel``, which takes the connection over (a forwarded port, ``ports.py``): it is
    handed the channel instead of an answer being written, and the connection closes after."""

    status: int = 200
    body: bytes | AsyncIterator[bytes] = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)
    tunnel: Tunnel | None = None


class Channel:
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

    # -- reading ---------------------------------------------------------------------------

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
                raise HeadTimeout(partial) from None
            if received and deadline is None:
                deadline = time.monotonic() + self.limits.header_timeout_s

    def request(self, event: h11.Request) -> Request:
        """The request a handler sees, from its head."""
        path, _, query = bytes(event.target).partition(b"?")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        method = event.method.decode()
        return Request(method, _path_text(path), parse_query(query), headers, self, event=event)

    async def next_body_event(self) -> object:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                await self._receive(self.limits.body_timeout_s)
            except TimeoutError:
                raise DaemonError(
                    f"no request body data for {self.limits.body_timeout_s} s",
                    reason=Reason.BODY_TIMEOUT,
                ) from None

    # -- writing ---------------------------------------------------------------------------

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

    async def respond(self, response: Response) -> None:
        headers = [("content-type", response.content_type), *response.headers]
        if isinstance(response.body, bytes):
            # One write for head, body and end: fewer syscalls and segments per call.
            headers.append(("content-length", str(len(response.body))))
            conn = self.conn
            data = conn.send(h11.Response(status_code=response.status, headers=headers)) or b""
            if response.body:
                data += conn.send(h11.Data(data=response.body)) or b""
            data += conn.send(h11.EndOfMessage()) or b""
            await self.write(data)
            return
        await self.send(h11.Response(status_code=response.status, headers=headers))
        await self._stream(response.body)
        await self.send(h11.EndOfMessage())

    async def _stream(self, stream: AsyncIterator[bytes]) -> None:
        """Send chunks as they come while watching the socket: a client that hangs up stops
        the stream (and so, e.g., the command behind it) instead of leaving it running until
        its next chunk fails to send."""
        chunks = stream.__aiter__()
        hangup = asyncio.ensure_future(self.reader.read(READ_CHUNK))
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
                    self.conn.receive_data(data)  # a pipelined request: keep it for later
                    hangup = asyncio.ensure_future(self.reader.read(READ_CHUNK))
                    await asyncio.wait({following})
                try:
                    chunk = following.result()
                except StopAsyncIteration:
                    return
                if chunk:
                    await self.send(h11.Data(data=chunk))
        finally:
            hangup.cancel()
            await asyncio.gather(hangup, return_exceptions=True)
            await close_stream(stream)

    async def finish_cycle(self, request: Request) -> bool:
        """Discard any unread body so the connection can be reused; False means close it."""
        conn = self.conn
        if conn.their_state is h11.SEND_BODY:
            try:
                async for _ in request.body_chunks(DRAIN_LIMIT):
                    pass
            except DaemonError:
                await self._linger()
                return False
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            return True
        return False

    async def _linger(self) -> None:
        """Before closing on a client still sending a body we answered early (an upload
        refused at its first member), read and drop a bounded amount of it: closing at once
        resets the connection, and a client busy writing its body then never reads the
        answer."""
        with contextlib.suppress(Exception):
            if self.writer.can_write_eof():
                self.writer.write_eof()
            received = 0
            async with asyncio.timeout(LINGER_S):
                while received < LINGER_BYTES and (data := await self.reader.read(READ_CHUNK)):
                    received += len(data)

    async def reply_error(self, error: DaemonError) -> None:
        """An error answer before (or instead of) a request: raw bytes, then close."""
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        body, status = error_body(error), error.status
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
            await self.write(head.encode() + body)

    def evict(self) -> None:
        self.evicted = True
        self.writer.transport.abort()


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    channel: Channel
    #: The head as it arrived (raw target, every header in order): what a forwarded port
    #: passes on (``ports.py``).
    event: h11.Request | None = None
    path_params: dict[str, str] = field(default_factory=dict)
    _body_done: bool = False

    async def body_chunks(self, limit: int) -> AsyncIterator[bytes]:
        """Yield the request body as it arrives; a 413 ``body_too_large`` past ``limit``."""
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise DaemonError(
                f"request body of {declared} bytes exceeds the {limit}-byte cap",
                reason=Reason.BODY_TOO_LARGE,
            )
        received = 0
        while not self._body_done:
            try:
                event = await self.channel.next_body_event()
            except h11.RemoteProtocolError as exc:
                raise DaemonError(
                    f"incomplete request body: {exc}", reason=Reason.INCOMPLETE_BODY
                ) from exc
            if isinstance(event, h11.Data):
                received += len(event.data)
                if received > limit:
                    raise DaemonError(
                        f"request body exceeds the {limit}-byte cap", reason=Reason.BODY_TOO_LARGE
                    )
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._body_done = True
            else:
                raise DaemonError(
                    "connection closed while reading the request body", reason=Reason.BAD_REQUEST
                )

    async def read_body(self, limit: int) -> bytes:
        parts = [chunk async for chunk in self.body_chunks(limit)]
        return b"".join(parts)


def error_body(exc: DaemonError) -> bytes:
    """The answer's body for ``exc`` (the one error wire model, ``sandman.wire.errors``)."""
    return encode_error(exc.reason, exc.message)


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
