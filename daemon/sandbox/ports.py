"""Forwarded ports: ``/v1/ports/{port}/...`` reaches a server listening inside the sandbox.

Why through the daemon: a sandbox has one ingress port, and its NetworkPolicy lets only the
facade reach it; a server an agent starts (a web app under test, a notebook) is reached over
that same port and token instead of a second opening per sandbox.

Why bytes and not HTTP: the daemon connects to the server, sends it the request's head
rewritten (target without the prefix, the daemon's ``Authorization`` and the hop-by-hop
headers dropped, ``Host`` the server's, ``Connection: close``, or ``Connection: upgrade``
for an upgrade), then splices both directions as raw bytes until both have ended. The body
keeps the framing it came with (``Content-Length`` or chunked), the answer goes back as the
server wrote it, and a WebSocket upgrade (the server's ``101``, then frames) needs no code of
its own: so nothing is buffered, a body of any size streams, and the daemon parses no HTTP
of the server's. The connection is the tunnel's from then on and closes after it (the
facade forwards ports over connections it does not pool).

Bounds, the daemon's own (``ConnectionLimits``): the connect within ``header_timeout_s``;
a tunnel in which no byte moved either way for ``keepalive_timeout_s`` is closed; a write
that stalls ``send_timeout_s`` (a peer that stopped reading) ends it. A half-close is passed
on (EOF one way, the other keeps flowing). A tunnel holds one of ``max_connections``.

Where the server is looked for: the daemon's own address first when it listens on one (the
pod IP; in the devstack's process runtime every sandbox shares the host's network, and its
own 127.x.y.z keeps one sandbox's server apart from another's), then 127.0.0.1. Refused at
both: 502 ``port_not_listening``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from sandman.wire.errors import Reason

from .errors import DaemonError
from .http_connection import Channel, ConnectionLimits, Request, Response
from .port_paths import PortPathError, port_target

__all__ = ["PREFIX", "PortForwarder", "is_port_request"]

READ_CHUNK = 64 * 1024
#: Never passed to the sandbox's server: the daemon's credential and this hop's own headers.
DROPPED = frozenset(
    {
        b"authorization",
        b"connection",
        b"keep-alive",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"host",
        b"upgrade",
    }
)
WILDCARDS = ("", "0.0.0.0", "::", "127.0.0.1", "localhost")


#: The raw request-target prefix of a forwarded port (simcluster's stand-in daemon answers
#: the same prefix, held to this one by tests/integration/test_stand_in_conformance.py).
PREFIX = b"/v1/ports/"


def is_port_request(request: Request) -> bool:
    """A request for a forwarded port (decided on the raw target, never the decoded path)."""
    return request.event is not None and bytes(request.event.target).startswith(PREFIX)


@dataclass(slots=True)
class _Activity:
    """When a byte last moved through the tunnel, either way (the idle bound is shared)."""

    idle_s: float
    last: float = 0.0

    def touch(self) -> None:
        self.last = time.monotonic()

    def remaining(self) -> float:
        return self.last + self.idle_s - time.monotonic()


class PortForwarder:
    """Opens the upstream connection of a port request and hands back the tunnel."""

    def __init__(self, limits: ConnectionLimits, host: str, own_port: int) -> None:
        self.limits = limits
        self.hosts = ("127.0.0.1",) if host in WILDCARDS else (host, "127.0.0.1")
        self.own_port = own_port
        #: Tunnels open now (tests and ``/v1/info`` readers).
        self.open_tunnels = 0

    async def open(self, request: Request) -> Response:
        """Connect to the port (a 4xx/502 if that cannot be), then the tunnel's Response."""
        assert request.event is not None
        try:
            raw = bytes(request.event.target).decode("latin-1")
            target = port_target(raw, reserved=self.own_port)
        except PortPathError as exc:
            raise DaemonError(exc.message, reason=exc.reason) from None
        reader, writer = await self._connect(target.port)
        head = _head(request, target.target, target.port)

        async def tunnel(channel: Channel) -> None:
            self.open_tunnels += 1
            try:
                await self._splice(channel, reader, writer, head)
            finally:
                self.open_tunnels -= 1
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

        return Response(tunnel=tunnel)

    async def _connect(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        refused: list[str] = []
        for host in self.hosts:
            try:
                async with asyncio.timeout(self.limits.header_timeout_s):
                    return await asyncio.open_connection(host, port, limit=READ_CHUNK)
            except TimeoutError:
                refused.append(f"{host}: no answer in {self.limits.header_timeout_s} s")
            except OSError as exc:
                refused.append(f"{host}: {exc.strerror or exc}")
        raise DaemonError(
            f"nothing listens on port {port} in the sandbox ({'; '.join(refused)})",
            reason=Reason.PORT_NOT_LISTENING,
        )

    async def _splice(
        self,
        channel: Channel,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        head: bytes,
    ) -> None:
        activity = _Activity(self.limits.keepalive_timeout_s)
        activity.touch()
        pending, _ = channel.conn.trailing_data  # body bytes read along with the head
        await self._write(writer, head + bytes(pending))
        pumps = [
            asyncio.ensure_future(self._pump(channel.reader, writer, activity)),
            asyncio.ensure_future(self._pump(reader, channel.writer, activity)),
        ]
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
            if any(not task.cancelled() and task.exception() for task in done):
                return  # a reset, a stalled peer or the idle bound: end both ways
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, activity: _Activity
    ) -> None:
        """One direction until its EOF (passed on as a half-close)."""
        while True:
            try:
                async with asyncio.timeout(max(activity.remaining(), 0.0)):
                    data = await source.read(READ_CHUNK)
            except TimeoutError:
                if activity.remaining() > 0:
                    continue  # the other direction moved meanwhile
                raise
            if not data:
                with contextlib.suppress(OSError):
                    if sink.can_write_eof():
                        sink.write_eof()
                return
            activity.touch()
            await self._write(sink, data)

    async def _write(self, sink: asyncio.StreamWriter, data: bytes) -> None:
        sink.write(data)
        try:
            async with asyncio.timeout(self.limits.send_timeout_s):
                await sink.drain()
        except TimeoutError:
            raise ConnectionResetError("the peer stopped reading the tunnel") from None


def _head(request: Request, target: str, port: int) -> bytes:
    """The request's head for the sandbox's server (module docstring: what is dropped)."""
    event = request.event
    assert event is not None
    connection = {
        token.strip().lower()
        for name, value in event.headers
        if name == b"connection"
        for token in value.split(b",")
    }
    upgrade = b"upgrade" in connection and any(name == b"upgrade" for name, _ in event.headers)
    lines = [b"%s %s HTTP/1.1" % (bytes(event.method), target.encode("latin-1"))]
    lines.append(b"host: 127.0.0.1:%d" % port)
    for name, value in event.headers:
        if name not in DROPPED and name not in connection:
            lines.append(bytes(name) + b": " + bytes(value))
    if upgrade:
        lines += [b"upgrade: " + v for n, v in event.headers if n == b"upgrade"]
    lines.append(b"connection: upgrade" if upgrade else b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"
