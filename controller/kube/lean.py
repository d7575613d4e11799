"""A lean HTTP/1.1 transport for the controller's hottest request: ``POST pods/binding``.

Why: a 12,000-sandbox burst is 12,000 binds, and aiohttp's general-purpose request path
(URL parsing, cookie jar, header multidicts, tracing, timers, connector bookkeeping) was
the largest part of the controller's CPU per bind (docs/controller.md §9). A bind needs
none of that: one small JSON body out, a status code and a small JSON body back, on a
kept-alive connection. This transport does exactly that over the same TLS context and
credentials as the aiohttp session, and nothing else (no redirects, no proxies, no
compression, no cookies: the API server uses none of them for this request).

The protocol is h11's (sans-I/O HTTP/1.1, as the sandbox daemon's server uses): it frames
the request, parses the response (Content-Length, chunked, delimited by the end of the
connection) and says whether the connection may be reused. This module only adds the
I/O: an asyncio protocol per connection, a pool of kept-alive ones, the deadline.

Errors are :class:`TransportError` like the aiohttp path's: ``sent=False`` when no
connection could be made (always safe to repeat), otherwise the request may have arrived.
A malformed response (h11's ``RemoteProtocolError``) is a TransportError too. The caller's
retry and error mapping (``KubeClient.request``) are the same for both paths.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlsplit

import h11

from controller.kube.errors import TransportError

__all__ = ["LeanPool", "LeanResponse"]

#: (HTTP status, lower-cased response headers, body)
LeanResponse = tuple[int, dict[str, str], bytes]
_MAX_HEAD = 64 * 1024


class _Connection(asyncio.Protocol):
    """One kept-alive connection; one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
        self._waiter: asyncio.Future[LeanResponse] | None = None
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []

    @property
    def reusable(self) -> bool:
        """The last response was complete and neither side asked to close."""
        return (
            not self.closed
            and self._h11.our_state is h11.DONE
            and self._h11.their_state is h11.DONE
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self.close()  # bytes nobody asked for: the connection is out of step
            return
        self._h11.receive_data(data)
        self._read(waiter)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if exc is None:
            self._h11.receive_data(b"")  # a response without a length ends here
            self._read(waiter)
        if not waiter.done():
            waiter.set_exception(TransportError(f"connection closed: {exc or 'EOF'}"))

    def _read(self, waiter: asyncio.Future[LeanResponse]) -> None:
        """Take h11's events so far; resolve ``waiter`` at the end of the response."""
        conn = self._h11
        try:
            while True:
                event = conn.next_event()
                kind = type(event)
                if kind is h11.Data:
                    self._body.append(cast(h11.Data, event).data)
                elif kind is h11.Response:
                    response = cast(h11.Response, event)
                    self._status = response.status_code
                    self._headers = {
                        name.decode("latin-1"): value.decode("latin-1")
                        for name, value in response.headers
                    }
                elif kind is h11.EndOfMessage:
                    waiter.set_result((self._status, self._headers, b"".join(self._body)))
                    return
                elif event is h11.NEED_DATA or kind is h11.ConnectionClosed:
                    return  # connection_lost reports an early end
                # InformationalResponse (1xx): the real response follows
        except h11.RemoteProtocolError as e:
            waiter.set_exception(TransportError(f"bad response: {e}"))

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def roundtrip(
        self, request: h11.Request, body: bytes, left_s: float, limit_s: float
    ) -> LeanResponse:
        """Send ``request`` with ``body``, wait up to ``left_s`` for the response
        (``limit_s``: the caller's whole limit, for the error message)."""
        assert self.transport is not None
        conn = self._h11
        if conn.our_state is h11.DONE:
            conn.start_next_cycle()  # the previous exchange on this connection
        data = b"".join(
            (
                conn.send(request) or b"",
                conn.send(h11.Data(data=body)) or b"",
                conn.send(h11.EndOfMessage()) or b"",
            )
        )
        loop = asyncio.get_running_loop()
        self._body = []
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

    async def request(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes, within_s: float
    ) -> LeanResponse:
        """One request; ``within_s`` bounds it from the call (waiting for a free connection
        slot, connecting, sending, the whole response)."""
        request = h11.Request(
            method=method,
            target=path,
            headers=[
                ("Host", self._host_header),
                ("User-Agent", self._user_agent),
                *headers.items(),
                ("Content-Length", str(len(body))),
            ],
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s  # like aiohttp's total: queueing and connect count
        async with self._slots:
            conn = self._take_idle() or await self._connect()
            left = deadline - loop.time()
            if left <= 0:
                self._idle.append(conn)
                raise TransportError(f"no connection within {within_s:g} s", sent=False)
            try:
                response = await conn.roundtrip(request, body, left, within_s)
            except BaseException:
                conn.close()
                raise
            if conn.reusable:
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
