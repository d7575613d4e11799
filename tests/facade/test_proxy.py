"""The facade's hop to the sandbox daemon, against a real daemon process on loopback."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from devstack.launcher import LocalDaemon, start_local_daemon
from facade.errors import FacadeError, error_response
from facade.proxy import DaemonProxy

pytestmark = pytest.mark.anyio


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[LocalDaemon]:
    process = start_local_daemon(str(tmp_path))
    yield process
    assert process.stop() == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def _facade(target: str, token: str) -> AsyncIterator[str]:
    """A minimal aiohttp app that forwards /sandbox/{path} to one daemon."""
    proxy = DaemonProxy()
    await proxy.start()
    parts = urlsplit(target)

    async def forward(request: web.Request) -> web.StreamResponse:
        try:
            return await proxy.forward(
                request,
                parts.hostname or "",
                token,
                "/" + request.match_info["path"],
                port=parts.port,
            )
        except FacadeError as exc:
            return error_response(exc)

    app = web.Application()
    app.router.add_route("*", "/sandbox/{path:.*}", forward)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("/sandbox"))
    finally:
        await server.close()
        await proxy.close()


async def test_exec_files_and_streams_pass_through(daemon: LocalDaemon) -> None:
    async with _facade(daemon.url, daemon.token) as base, aiohttp.ClientSession() as http:
        async with http.post(f"{base}/v1/exec", json={"command": "echo via-proxy"}) as r:
            assert r.status == 200
            assert (await r.json())["stdout"]["data"] == "via-proxy\n"
        async with http.put(
            f"{base}/v1/files", params={"path": "f.bin"}, data=b"\x00" * 300_000
        ) as r:
            assert r.status == 200
        async with http.get(f"{base}/v1/files", params={"path": "f.bin"}) as r:
            assert await r.read() == b"\x00" * 300_000
        events = []
        async with http.post(f"{base}/v1/exec/stream", json={"command": "echo a; echo b"}) as r:
            assert r.headers["Content-Type"] == "application/x-ndjson"
            async for line in r.content:
                events.append(json.loads(line)["event"])
        assert events[0] == "start" and events[-1] == "exit"


async def test_daemon_errors_pass_through_unchanged(daemon: LocalDaemon) -> None:
    async with (
        _facade(daemon.url, daemon.token) as base,
        aiohttp.ClientSession() as http,
        http.post(f"{base}/v1/exec", data=b"{nope") as r,
    ):
        assert r.status == 400
        assert (await r.json())["error"]["reason"] == "invalid_json"


async def test_wrong_token_is_a_typed_502(daemon: LocalDaemon) -> None:
    async with (
        _facade(daemon.url, "not-the-token") as base,
        aiohttp.ClientSession() as http,
        http.get(f"{base}/v1/info") as r,
    ):
        assert r.status == 502
        assert (await r.json())["error"]["reason"] == "daemon_rejected_token"


async def test_unreachable_daemon_is_a_typed_502() -> None:
    dead = f"http://127.0.0.1:{_free_port()}"
    async with (
        _facade(dead, "t") as base,
        aiohttp.ClientSession() as http,
        http.get(f"{base}/v1/info") as r,
    ):
        assert r.status == 502
        assert (await r.json())["error"]["reason"] == "daemon_unreachable"
