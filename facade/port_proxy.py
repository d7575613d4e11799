"""Forwarded ports: ``/v1/sandboxes/{id}/ports/{port}/...`` to a server inside the sandbox.

The facade never reaches the sandbox's server itself: it sends the request to the daemon's
``/v1/ports/{port}/...`` on the pod IP with the sandbox's daemon token (as every tool call),
and the daemon, which is the sandbox's one ingress port, tunnels it on (daemon/sandbox/
ports.py). So the NetworkPolicy and the token stay what they are for tool calls.

HTTP: any method; the body streams up as it arrives (with its ``Content-Length`` when the
caller gave one, else chunked) and the answer streams back; the path and the query go on
as the caller encoded them (``yarl`` told not to normalise); hop-by-hop headers and the
caller's ``Authorization`` (the tenant's token) never reach the sandbox; redirects are the
caller's to follow. The daemon closes a port connection after its answer, so these go over
a session of their own that pools none (``force_close``), apart from the tool calls' pool.

WebSocket: the caller's upgrade is answered by the facade itself once the sandbox's server
has accepted the daemon-tunnelled one (its subprotocol chosen there), then messages are
relayed both ways, close codes included, each at most ``websocket_message_bytes``. Relayed
as messages, not bytes: aiohttp's server has no public way to hand a connection's raw bytes
over after a 101, and a message relay bounds what one frame can make the facade hold. A
refused upgrade is 502 ``upgrade_refused`` (what the server answered in the message), or the
daemon's own reason (its ``x-sandman-reason`` header), such as ``port_not_listening``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import aiohttp
from aiohttp import web
from yarl import URL

from daemon.sandbox.port_paths import PORTS_PREFIX, PortTarget
from sandman.wire.errors import REASON_HEADER, Reason, reason_named

from .errors import FacadeError
from .proxy_limits import ProxyLimits

__all__ = ["HOP_HEADERS", "PortProxy", "is_upgrade"]

#: Never sent on: this hop's own headers and the caller's credential (the daemon's replaces it).
HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "host",
        "authorization",
    }
)
#: What ws_connect writes itself on the upgrade to the daemon.
WEBSOCKET_HEADERS = frozenset(
    {"sec-websocket-key", "sec-websocket-version", "sec-websocket-protocol"}
    | {"sec-websocket-extensions", "content-length"}
)
_DAEMON_TOKEN_REASONS = ("missing_token", "invalid_token")


def is_upgrade(request: web.Request) -> bool:
    """A WebSocket upgrade request (``Connection: upgrade`` + ``Upgrade: websocket``)."""
    tokens = {t.strip().lower() for t in request.headers.get("Connection", "").split(",")}
    return "upgrade" in tokens and request.headers.get("Upgrade", "").lower() == "websocket"


class PortProxy:
    def __init__(self, limits: ProxyLimits, daemon_port: int) -> None:
        self.limits = limits
        self.daemon_port = daemon_port
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.limits.total_connections, force_close=True)
        timeout = aiohttp.ClientTimeout(
            total=self.limits.request_timeout_s, sock_connect=self.limits.connect_timeout_s
        )
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("PortProxy.start() was not called")
        return self._session

    def url(self, pod_ip: str, target: PortTarget) -> URL:
        """The daemon's URL of ``target``, sent as it is (no re-quoting, no dot-segments
        resolved: port_paths.py refused those already)."""
        raw = f"http://{pod_ip}:{self.daemon_port}{PORTS_PREFIX}{target.port}{target.target}"
        return URL(raw, encoded=True)

    async def forward(
        self, request: web.Request, pod_ip: str, token: str, target: PortTarget
    ) -> web.StreamResponse:
        """One HTTP request to the port; the answer streams back."""
        headers = _headers(request, token, HOP_HEADERS)
        data = request.content if request.body_exists else None
        try:
            async with self.session.request(
                request.method,
                self.url(pod_ip, target),
                data=data,
                headers=headers,
                allow_redirects=False,
            ) as upstream:
                _check_token(upstream.status, upstream.headers)
                return await _relay(request, upstream)
        except aiohttp.ClientConnectionError as exc:
            raise _hop_error(exc) from exc
        except TimeoutError as exc:
            raise FacadeError(
                "the sandbox did not answer in time", reason=Reason.DAEMON_TIMEOUT
            ) from exc

    async def websocket(
        self, request: web.Request, pod_ip: str, token: str, target: PortTarget
    ) -> web.StreamResponse:
        """The upgrade: the sandbox's server first, then the caller's, then the relay."""
        protocols = [
            p.strip()
            for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
            if p.strip()
        ]
        headers = _headers(request, token, HOP_HEADERS | WEBSOCKET_HEADERS)
        try:
            upstream = await self.session.ws_connect(
                self.url(pod_ip, target),
                headers=headers,
                protocols=protocols,
                max_msg_size=self.limits.websocket_message_bytes,
                timeout=aiohttp.ClientWSTimeout(ws_close=self.limits.connect_timeout_s),
                autoclose=False,
            )
        except aiohttp.WSServerHandshakeError as exc:
            raise _refused_upgrade(exc) from exc
        except aiohttp.ClientConnectionError as exc:
            raise _hop_error(exc) from exc
        try:
            chosen = (upstream.protocol,) if upstream.protocol else ()
            caller = web.WebSocketResponse(
                protocols=chosen, max_msg_size=self.limits.websocket_message_bytes, autoclose=False
            )
            await caller.prepare(request)
            await _relay_messages(caller, upstream, self.limits.connect_timeout_s)
            return caller
        finally:
            await upstream.close()


def _headers(request: web.Request, token: str, dropped: frozenset[str]) -> list[tuple[str, str]]:
    """The caller's headers minus ``dropped`` and those its ``Connection`` names, plus the
    daemon's token."""
    named = {t.strip().lower() for t in request.headers.get("Connection", "").split(",")}
    kept = [
        (k, v)
        for k, v in request.headers.items()
        if k.lower() not in dropped and k.lower() not in named
    ]
    return [*kept, ("Authorization", f"Bearer {token}")]


def _check_token(status: int, headers: Mapping[str, str]) -> None:
    """A 401 the daemon answered (not the sandbox's server): the facade's token is wrong."""
    if status == 401 and headers.get(REASON_HEADER) in _DAEMON_TOKEN_REASONS:
        raise FacadeError(
            "the sandbox daemon rejected the facade's token", reason=Reason.DAEMON_REJECTED_TOKEN
        )


async def _relay(request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    for key, value in upstream.headers.items():
        if key.lower() not in HOP_HEADERS and key.lower() != "content-length":
            response.headers.add(key, value)
    if upstream.content_length is not None:
        response.content_length = upstream.content_length
    await response.prepare(request)
    try:
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
    except (ConnectionResetError, asyncio.CancelledError):
        upstream.close()  # the caller hung up: drop the tunnel too
        raise
    except aiohttp.ClientPayloadError:
        upstream.close()  # the server broke off mid-answer: so does ours
        raise ConnectionResetError("the sandbox's server broke off its answer") from None
    await response.write_eof()
    return response


Socket = web.WebSocketResponse | aiohttp.ClientWebSocketResponse


async def _relay_messages(caller: web.WebSocketResponse, upstream: Socket, close_s: float) -> None:
    """Messages both ways until either side closes; the close handshake goes through, its
    code both ways (the closer's to the other side, the other side's answer back)."""
    pumps = [
        asyncio.ensure_future(_pump(caller, upstream)),
        asyncio.ensure_future(_pump(upstream, caller)),
    ]
    try:
        _, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(close_s):  # the other side's part of the close
                await asyncio.wait(pending)
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


async def _pump(source: Socket, sink: Socket) -> None:
    """One direction (both sides have ``autoclose`` off: a close is relayed, not answered)."""
    while True:
        message = await source.receive()
        if message.type == aiohttp.WSMsgType.TEXT:
            await sink.send_str(message.data)
        elif message.type == aiohttp.WSMsgType.BINARY:
            await sink.send_bytes(message.data)
        elif message.type == aiohttp.WSMsgType.CLOSE:
            await sink.close(code=_code(message.data))
            await source.close(code=_code(sink.close_code))
            return
        elif message.type == aiohttp.WSMsgType.CLOSING:
            return  # the other pump is closing this side
        else:  # CLOSED, ERROR: this side is gone; end the other one
            await sink.close(code=aiohttp.WSCloseCode.GOING_AWAY)
            return


def _code(code: object) -> int:
    """A close code that may be sent on (1005, 1006, 1015 are never sent)."""
    if isinstance(code, int) and (1000 <= code < 5000) and code not in (1005, 1006, 1015):
        return code
    return aiohttp.WSCloseCode.OK


def _hop_error(exc: aiohttp.ClientConnectionError) -> FacadeError:
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return FacadeError(f"sandbox daemon timed out: {exc}", reason=Reason.DAEMON_TIMEOUT)
    return FacadeError(f"sandbox daemon unreachable: {exc}", reason=Reason.DAEMON_UNREACHABLE)


def _refused_upgrade(exc: aiohttp.WSServerHandshakeError) -> FacadeError:
    headers: Mapping[str, str] = exc.headers if exc.headers is not None else {}
    _check_token(exc.status, headers)
    own = reason_named(headers.get(REASON_HEADER, ""))
    if own is not None and own.status == exc.status:
        return FacadeError(f"the sandbox daemon refused the upgrade: {own.meaning}", reason=own)
    return FacadeError(
        f"the server in the sandbox answered the WebSocket upgrade with {exc.status}",
        reason=Reason.UPGRADE_REFUSED,
    )
