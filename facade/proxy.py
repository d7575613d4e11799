"""Tool calls go from the facade straight to the sandbox daemon on the pod IP.

Never through the API server: exec, sessions, processes and files are proxied over pooled
keep-alive connections (aiohttp: ~0.1 ms of client CPU per request, BENCHMARKS.md), with the
sandbox's derived token added on the way. Bodies stream in both directions, so a tar upload or
a streaming exec never sits in the facade's memory, and a trainer that hangs up closes the
upstream connection (the daemon then stops a streamed command).

Failures of the hop itself are typed: ``daemon_unreachable`` (502: connection refused or
reset, e.g. the pod is gone or not ready yet), ``daemon_timeout`` (504), and
``daemon_rejected_token`` (502: the pod's token does not match, which means a replaced pod or
a rotated facade secret). Errors the daemon answers itself pass through unchanged.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from daemon.sandbox.layout import DAEMON_PORT
from sandman.wire.errors import Reason

from .errors import FacadeError
from .port_proxy import HOP_HEADERS as PORT_HOP_HEADERS
from .port_proxy import PortProxy
from .proxy_limits import ProxyLimits

__all__ = ["DaemonProxy", "ProxyLimits"]

#: Not passed on to the daemon nor back: the hop's own headers and the caller's credential
#: (one list with the forwarded ports'), and the length aiohttp writes again.
HOP_HEADERS = PORT_HOP_HEADERS | {"content-length"}


class DaemonProxy:
    def __init__(self, limits: ProxyLimits | None = None, *, port: int = DAEMON_PORT) -> None:
        self.limits = limits or ProxyLimits()
        self.port = port
        """The daemon port on each pod IP (daemon/sandbox/layout.py)."""
        self._session: aiohttp.ClientSession | None = None
        #: Forwarded ports (facade/port_proxy.py): through the same daemon, unpooled.
        self.ports = PortProxy(self.limits, port)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self.limits.total_connections,
            limit_per_host=self.limits.per_pod_connections,
            keepalive_timeout=self.limits.keepalive_s,
        )
        timeout = aiohttp.ClientTimeout(
            total=self.limits.request_timeout_s, sock_connect=self.limits.connect_timeout_s
        )
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False
        )
        await self.ports.start()

    async def close(self) -> None:
        await self.ports.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def forward(
        self,
        request: web.Request,
        pod_ip: str,
        token: str,
        path: str,
        *,
        port: int | None = None,
        body: bytes | None = None,
    ) -> web.StreamResponse:
        """Forward ``request`` to ``path`` on the daemon at ``pod_ip``; stream the answer back.
        ``body``: the request's body when the caller has read it already (the audit log
        reads an exec's), else it streams from the request."""
        if self._session is None:
            raise RuntimeError("DaemonProxy.start() was not called")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        headers["Authorization"] = f"Bearer {token}"
        url = f"http://{pod_ip}:{port or self.port}{path}"
        data = body if body is not None else (request.content if request.body_exists else None)
        try:
            async with self._session.request(
                request.method, url, params=request.query, data=data, headers=headers
            ) as upstream:
                return await self._relay(request, upstream)
        except aiohttp.ClientConnectionError as exc:
            if isinstance(exc, aiohttp.ServerTimeoutError):
                raise FacadeError(
                    f"sandbox daemon timed out: {exc}", reason=Reason.DAEMON_TIMEOUT
                ) from exc
            raise FacadeError(
                f"sandbox daemon unreachable: {exc}", reason=Reason.DAEMON_UNREACHABLE
            ) from exc
        except TimeoutError as exc:
            raise FacadeError(
                "sandbox daemon did not answer in time", reason=Reason.DAEMON_TIMEOUT
            ) from exc

    @staticmethod
    async def _relay(request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        if upstream.status == 401:
            raise FacadeError(
                "the sandbox daemon rejected the facade's token",
                reason=Reason.DAEMON_REJECTED_TOKEN,
            )
        response = web.StreamResponse(status=upstream.status)
        for key, value in upstream.headers.items():
            if key.lower() not in HOP_HEADERS:
                response.headers[key] = value
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
        except (ConnectionResetError, asyncio.CancelledError):
            upstream.close()  # the trainer hung up: drop the upstream call too
            raise
        await response.write_eof()
        return response
