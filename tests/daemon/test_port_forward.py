"""Forwarded ports (daemon/sandbox/ports.py): a real daemon process tunnels to real servers.

The servers are small aiohttp apps and raw asyncio servers on loopback in the test's own
process, standing in for what an agent starts inside a sandbox; the daemon is its own
process, reached with its token as the facade reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from tests.support.daemon import DaemonProcess
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


def _app() -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response(
            {
                "method": request.method,
                "path": request.raw_path,
                "host": request.headers.get("Host"),
                "authorization": request.headers.get("Authorization"),
                "custom": request.headers.getall("X-Custom", []),
                "length": len(body),
                "sha256": hashlib.sha256(body).hexdigest(),
            }
        )

    async def download(request: web.Request) -> web.StreamResponse:
        size = int(request.query["bytes"])
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(size // 65536):
            await response.write(b"x" * 65536)
        await response.write_eof()
        return response

    async def websocket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                await ws.send_str(f"echo:{message.data}")
            elif message.type == aiohttp.WSMsgType.BINARY:
                await ws.send_bytes(message.data[::-1])
        return ws

    app = web.Application(client_max_size=64 << 20)
    app.router.add_get("/download", download)
    app.router.add_get("/ws", websocket)
    app.router.add_route("*", "/{tail:.*}", echo)
    return app


@contextlib.asynccontextmanager
async def _serving(app: web.Application) -> AsyncIterator[int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[int]:
    async with _serving(_app()) as port:
        yield port


@pytest.fixture
async def http(daemon: DaemonProcess) -> AsyncIterator[aiohttp.ClientSession]:
    headers = {"Authorization": f"Bearer {daemon.token}"}
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        yield session


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_get_keeps_path_and_query_drops_the_token(
    daemon: DaemonProcess, http: aiohttp.ClientSession, server: int
) -> None:
    url = URL(f"{daemon.url}/v1/ports/{server}/a/b%20c?x=1&y=%2F", encoded=True)
    async with http.get(url, headers={"X-Custom": "kept"}) as r:
        assert r.status == 200
        seen = await r.json()
    assert seen["method"] == "GET"
    assert seen["path"] == "/a/b%20c?x=1&y=%2F"
    assert seen["host"] == f"127.0.0.1:{server}"
    assert seen["authorization"] is None
    assert seen["custom"] == ["kept"]


@pytest.mark.parametrize("chunked", [False, True])
async def test_large_bodies_stream_both_ways(
    daemon: DaemonProcess, http: aiohttp.ClientSession, server: int, chunked: bool
) -> None:
    payload = bytes(range(256)) * (24 << 12)  # 24 MiB

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 1 << 20):
            yield payload[start : start + (1 << 20)]

    data = chunks() if chunked else io.BytesIO(payload)
    async with http.post(f"{daemon.url}/v1/ports/{server}/upload", data=data) as r:
        assert r.status == 200
        seen = await r.json()
    assert (seen["length"], seen["sha256"]) == (len(payload), hashlib.sha256(payload).hexdigest())
    async with http.get(f"{daemon.url}/v1/ports/{server}/download?bytes={32 << 20}") as r:
        assert r.status == 200
        total = 0
        async for chunk in r.content.iter_any():
            total += len(chunk)
    assert total == 32 << 20


async def test_websocket_echo_through_the_tunnel(
    daemon: DaemonProcess, http: aiohttp.ClientSession, server: int
) -> None:
    async with http.ws_connect(f"{daemon.url}/v1/ports/{server}/ws") as ws:
        await ws.send_str("hello")
        assert (await ws.receive_str()) == "echo:hello"
        await ws.send_bytes(b"\x00\x01\x02")
        assert (await ws.receive_bytes()) == b"\x02\x01\x00"


async def test_nothing_listening_is_a_502(
    daemon: DaemonProcess, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{daemon.url}/v1/ports/{_free_port()}/") as r:
        assert r.status == 502
        assert (await r.json())["error"]["reason"] == "port_not_listening"


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        ("0/", "invalid_port"),
        ("65536/", "invalid_port"),
        ("080/", "invalid_port"),
        ("http/", "invalid_port"),
        ("{own}/v1/info", "port_reserved"),
        ("{port}/a/../../../v1/claim", "invalid_path"),
        ("{port}/%2e%2E/v1/exec", "invalid_path"),
        ("{port}/a%2Fb", "invalid_path"),
        ("{port}/a%5Cb", "invalid_path"),
        ("{port}//double", "invalid_path"),
        ("{port}/nul%00", "invalid_path"),
    ],
)
async def test_hostile_targets_are_refused(
    daemon: DaemonProcess, server: int, tail: str, reason: str
) -> None:
    host, own = daemon.url.removeprefix("http://").split(":")
    target = "/v1/ports/" + tail.format(own=own, port=server)
    status, body = await _raw_request(host, int(own), target, daemon.token)
    assert status == 400, body
    assert f'"reason":"{reason}"' in body


async def test_a_port_call_needs_the_token(daemon: DaemonProcess, server: int) -> None:
    url = f"{daemon.url}/v1/ports/{server}/"
    async with aiohttp.ClientSession() as plain, plain.get(url) as r:
        assert r.status == 401


async def test_a_half_close_is_passed_on(daemon: DaemonProcess) -> None:
    """The client ends its side; the server reads to EOF, then answers on the other."""

    async def until_eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received = await reader.read()  # everything, up to the client's EOF
        body = b"got %d" % len(received)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(until_eof, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    host, own = daemon.url.removeprefix("http://").split(":")
    try:
        reader, writer = await asyncio.open_connection(host, int(own))
        writer.write(
            f"POST /v1/ports/{port}/ HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
            f"{daemon.token}\r\ncontent-length: 5\r\n\r\nhello".encode()
        )
        writer.write_eof()
        answer = await reader.read()
        writer.close()
    finally:
        upstream.close()
        await upstream.wait_closed()
    assert answer.startswith(b"HTTP/1.1 200 OK")
    head = answer.split(b"\r\n\r\n")[0]
    assert b"got " in answer and int(answer.rsplit(b"got ", 1)[1]) > len(head)


@pytest.mark.parametrize("daemon_args", [["--keepalive-timeout-s", "1"]])
async def test_an_idle_tunnel_is_closed(
    daemon: DaemonProcess, http: aiohttp.ClientSession, server: int
) -> None:
    async with http.ws_connect(f"{daemon.url}/v1/ports/{server}/ws", autoping=False) as ws:
        await ws.send_str("once")
        assert (await ws.receive_str()) == "echo:once"
        # Quiet on both sides: the daemon's keep-alive bound ends the tunnel.
        message = await ws.receive(timeout=20)
        assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        await wait_until_async(lambda: ws.closed, timeout_s=10)


async def _raw_request(host: str, port: int, target: str, token: str) -> tuple[int, str]:
    """One request with its target sent byte for byte (no client normalises it)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"GET {target} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n"
            "connection: close\r\n\r\n".encode()
        )
        answer = (await reader.read()).decode("latin-1")
    finally:
        writer.close()
    status = int(answer.split(" ", 2)[1])
    return status, answer.split("\r\n\r\n", 1)[1]
