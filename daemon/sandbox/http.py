"""A minimal HTTP/1.1 server for the sandbox daemon, built on asyncio streams and h11.

Why not aiohttp (which the facade and simcluster use): the daemon runs inside *every* sandbox,
so its idle footprint is multiplied by ten thousand. Importing aiohttp's server costs ~15 MiB
of RSS on top of the interpreter; h11 is a small, well-kept HTTP/1.1 state machine that does
the protocol work (parsing, framing, chunked encoding, keep-alive rules). This module adds only
what a small JSON API needs on top: routing by method and path template, bounded body reads,
and streaming responses with backpressure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import unquote, unquote_to_bytes

import h11
import msgspec

from .errors import BadRequest, DaemonError, NotFound, PayloadTooLarge
from .streams import close_stream

__all__ = ["HttpServer", "Request", "Response", "Router", "parse_query"]

log = logging.getLogger("sandman.daemon.http")

READ_CHUNK = 64 * 1024
MAX_HEADER_BYTES = 32 * 1024
DRAIN_LIMIT = 1024 * 1024  # unread request body we are willing to discard to keep a connection

Handler = Callable[["Request"], Awaitable["Response"]]


@dataclass(slots=True)
class Response:
    """A response: a complete body (bytes) or an async iterator of chunks (streamed, chunked)."""

    status: int = 200
    body: bytes | AsyncIterator[bytes] = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


class _Channel:
    """One client connection: the h11 state machine plus its stream pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)

    async def next_event(self) -> object:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await self.reader.read(READ_CHUNK)
            self.conn.receive_data(data)

    async def send(self, event: h11.Event) -> None:
        data = self.conn.send(event)
        if data:
            self.writer.write(data)
            await self.writer.drain()


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
                event = await self.channel.next_event()
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


class HttpServer:
    """Serve ``app`` (a Request -> Response coroutine) on one TCP listener."""

    def __init__(self, app: Handler) -> None:
        self._app = app
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._serve, host, port, limit=MAX_HEADER_BYTES)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        channel = _Channel(reader, writer)
        try:
            await self._serve_requests(channel)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except h11.RemoteProtocolError as exc:
            await self._reply_protocol_error(channel, exc)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_requests(self, channel: _Channel) -> None:
        while True:
            event = await channel.next_event()
            if not isinstance(event, h11.Request):
                return  # ConnectionClosed (or a stray event): done with this client
            request = self._make_request(channel, event)
            response = await self._dispatch(request)
            try:
                await self._send_response(channel, response)
            finally:  # a streamed body holds resources until closed, even if never sent
                await close_stream(response.body)
            if not await self._finish_cycle(channel, request):
                return

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
            channel.writer.write(data)
            await channel.writer.drain()
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
                return False
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            return True
        return False

    @staticmethod
    async def _reply_protocol_error(channel: _Channel, exc: h11.RemoteProtocolError) -> None:
        if channel.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        body = _error_body(BadRequest(f"malformed HTTP request: {exc}", reason="bad_http"))
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        with contextlib.suppress(Exception):
            await channel.send(h11.Response(status_code=exc.error_status_hint, headers=headers))
            await channel.send(h11.Data(data=body))
            await channel.send(h11.EndOfMessage())
