"""A lean HTTP/1.1 transport for the hottest requests: the controller's ``POST pods/binding``
and the facade's pre-placed pod creates.

Why: a 12,000-sandbox burst is 12,000 binds, and aiohttp's general-purpose request path
(URL parsing, cookie jar, header multidicts, tracing, timers, connector bookkeeping) was
the largest part of the controller's CPU per bind (docs/controller.md §9). A bind needs
none of that: one small JSON body out, a status code and a small JSON body back, on a
kept-alive connection. This transport does exactly that over the same TLS context and
credentials as the aiohttp session, and nothing else (no redirects, no proxies, no
compression, no cookies: the API server uses none of them for this request).

Errors are :class:`TransportError` like the aiohttp path's: ``sent=False`` when no
connection could be made (always safe to repeat), otherwise the request may have arrived.
The caller's retry and error mapping (``KubeClient.request``) are the same for both paths.

Why the HTTP/1.1 framing and parsing below are written by hand and not h11's (h11, sans-I/O
HTTP/1.1, is a project dependency and the library made for this): h11 was measured here and
rejected on CPU. On 2026-11-30 (2-core Debian 12 VM, shared), the h11 version of this module
(commit a71a8e8 on branch lean-h11: ``h11.Connection(h11.CLIENT)``, Request/Data/EndOfMessage
out, events in, ``start_next_cycle`` for keep-alive), alternating with this one, same commands:

- framing one bind POST and parsing a 201 with five headers and a 120-byte body: 88 µs of
  CPU with h11 (54 µs even with the Request built once and reused), 7 µs here;
- ``python -m load.bench.controller``, client CPU per 1,000 binds, median of 3: 0.124 s here,
  0.220 s with h11 (1.8x);
- ``python -m load.bench.controller_burst --pods 2000 --nodes 50``, controller CPU per 1,000 binds,
  median of 3: 0.190 s here, 0.280 s with h11 (1.5x);
- ``python -m load.bench.controller_burst`` (12,000 pods, 400 nodes), two runs each: 0.231 and
  0.265 s here, 0.346 and 0.367 s with h11. That is over the 0.3 s target.

h11 checks every header against regexes and moves a state machine per event. That's right
for a server facing arbitrary clients. Here the peer is the API server, the response is a
small JSON body, and it happens 12,000 times per burst. What's left here is the least a bind
needs: Content-Length, chunked, and end-of-stream bodies, keep-alive, and a malformed
response or a head over 64 KiB as a TransportError.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
import time
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlsplit

from kube.errors import SendDeadlinePassed, TransportError
from kube.settings import ClientSettings

__all__ = ["LeanPool", "LeanResponse"]

#: (HTTP status, lower-cased response headers, body)
LeanResponse = tuple[int, dict[str, str], bytes]
_MAX_HEAD = 64 * 1024


class _Incomplete(Exception):
    """More bytes are needed to finish the response."""


def _parse(buf: bytearray | bytes, eof: bool = False) -> tuple[LeanResponse, bool] | None:
    """A complete response at the start of ``buf`` and whether the connection stays open,
    or None while bytes are missing (``eof``: no more will come). Raises ValueError on a
    malformed response."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > _MAX_HEAD:
            raise ValueError("response head too large")
        return None
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x response: {lines[0][:40]!r}")
    status = int(rest[:3])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    start = end + 4
    if headers.get("transfer-encoding", "").lower() == "chunked":
        try:
            body = _dechunk(buf, start)
        except _Incomplete:
            return None
    elif "content-length" in headers:
        length = int(headers["content-length"])
        if len(buf) < start + length:
            return None
        body = bytes(buf[start : start + length])
    elif status in (204, 304) or 100 <= status < 200:
        body = b""
    elif eof:  # delimited by the end of the connection
        return (status, headers, bytes(buf[start:])), False
    else:
        return None
    keep = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
    return (status, headers, body), keep


def _dechunk(buf: bytearray | bytes, pos: int) -> bytes:
    out = bytearray()
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            raise _Incomplete
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        pos = eol + 2
        if size == 0:
            if buf.find(b"\r\n", pos) < 0:
                raise _Incomplete  # trailers end with an empty line
            return bytes(out)
        if len(buf) < pos + size + 2:
            raise _Incomplete
        out += buf[pos : pos + size]
        pos += size + 2


class _Connection(asyncio.Protocol):
    """One kept-alive connection; one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = bytearray()
        self._waiter: asyncio.Future[tuple[LeanResponse, bool]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        try:
            done = _parse(self._buf)
        except ValueError as e:
            waiter.set_exception(TransportError(f"bad response: {e}"))
            return
        if done is not None:
            waiter.set_result(done)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        try:
            done = _parse(self._buf, eof=True) if exc is None else None
        except ValueError:
            done = None
        if done is not None:
            waiter.set_result((done[0], False))
        else:
            waiter.set_exception(TransportError(f"connection closed: {exc or 'EOF'}"))

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def roundtrip(
        self, data: bytes, left_s: float, limit_s: float
    ) -> tuple[LeanResponse, bool]:
        """Send ``data``, wait up to ``left_s`` for the response (``limit_s``: the caller's
        whole limit, for the error message)."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._buf.clear()
        self._waiter = waiter = loop.create_future()
        timer = loop.call_later(left_s, self._expire, waiter, limit_s)
        try:
            self.transport.write(data)
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None

    @staticmethod
    def _expire(waiter: asyncio.Future[Any], timeout: float) -> None:
        if not waiter.done():
            waiter.set_exception(TransportError(f"no response within {timeout:g} s"))


def _tls_context(ssl: Any) -> ssl_module.SSLContext:
    """The aiohttp session's ``ssl`` argument as a context (False: no verification)."""
    if isinstance(ssl, ssl_module.SSLContext):
        return ssl
    context = ssl_module.create_default_context()
    if ssl is False:
        context.check_hostname = False
        context.verify_mode = ssl_module.CERT_NONE
    return context


class LeanPool:
    """Kept-alive connections to one API server, at most ``limit`` at once."""

    def __init__(
        self,
        base_url: str,
        ssl: ssl_module.SSLContext | None,
        *,
        server_hostname: str | None,
        limit: int,
        connect_timeout: float,
        user_agent: str,
    ) -> None:
        url = urlsplit(base_url)
        self._tls = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._tls else 80)
        self._host_header = url.netloc
        self._ssl = _tls_context(ssl) if self._tls else None
        self._server_hostname = server_hostname if self._tls else None
        self._connect_timeout = connect_timeout
        self._user_agent = user_agent
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []

    @classmethod
    def for_client(
        cls,
        base_url: str,
        ssl: ssl_module.SSLContext | None,
        server_hostname: str | None,
        settings: ClientSettings,
    ) -> LeanPool:
        """The pool a client of this layer opens (``KubeClient`` for its binds, ``LightClient``
        for every request): the client's connection limit, connect timeout and User-Agent."""
        return cls(
            base_url,
            ssl,
            server_hostname=server_hostname,
            limit=settings.max_connections,
            connect_timeout=settings.timeouts.connect_s,
            user_agent=settings.user_agent,
        )

    async def request(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        within_s: float,
        send_by: float | None = None,
    ) -> LeanResponse:
        """One request; ``within_s`` bounds it from the call (waiting for a free connection
        slot, connecting, sending, the whole response). ``send_by`` (``time.monotonic()``):
        checked once a connection is in hand, the moment before the bytes go out, so a wait
        for a slot cannot carry a request past it (:class:`SendDeadlinePassed`, not sent)."""
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        data = (
            f"{method} {path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
            f"User-Agent: {self._user_agent}\r\n{head}Content-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1") + body
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s  # like aiohttp's total: queueing and connect count
        async with self._slots:
            conn = self._take_idle() or await self._connect()
            left = deadline - loop.time()
            if left <= 0:
                self._idle.append(conn)
                raise TransportError(f"no connection within {within_s:g} s", sent=False)
            if send_by is not None and time.monotonic() > send_by:
                self._idle.append(conn)
                raise SendDeadlinePassed(f"{method} {path}: not sent, its deadline passed")
            try:
                response, keep = await conn.roundtrip(data, left, within_s)
            except BaseException:
                conn.close()
                raise
            if keep and not conn.closed:
                self._idle.append(conn)
            else:
                conn.close()
            return response

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(
                    _Connection,
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname,
                )
        except (OSError, TimeoutError) as e:
            raise TransportError(f"cannot connect: {type(e).__name__}: {e}", sent=False) from e
        return conn

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
