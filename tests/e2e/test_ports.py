"""Forwarded ports end to end: a server started inside a sandbox, reached through the facade.

SDK → facade (``/v1/sandboxes/{id}/ports/{port}/...``) → the sandbox's daemon (its one
ingress port) → the server, which is ``tests/support/port_server.py`` run by the sandbox's
own Python (an exec on the local stack's process runtime): HTTP of every size both ways, a
WebSocket echo, and the refusals — hostile paths, ports out of range or the daemon's, nothing
listening.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import pytest
from yarl import URL

from daemon.sandbox.layout import DAEMON_PORT
from devstack.ports import free_listen_port
from sandman import AsyncSandbox, AsyncSandman, InvalidRequest, Sandman, ServerError
from tests.support.stack import RunningStack as Stack
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.timeout(120), pytest.mark.anyio]
STACK = {"facade_replicas": 1}
IMAGE = "registry.example/tasks/ports:1"
SERVER = Path(__file__).resolve().parents[1] / "support" / "port_server.py"


async def _listening(sandbox: AsyncSandbox, port: int) -> bool:
    try:
        return (await sandbox.port(port).request("GET", "/")).status == 200
    except ServerError as e:
        if e.reason != "port_not_listening":
            raise
        return False


@pytest.fixture
async def served(stack: Stack, owner: str) -> AsyncIterator[tuple[AsyncSandbox, int]]:
    """A sandbox running the port server on a free port of its (shared, dev) network."""
    client = AsyncSandman(stack.url, stack.token, owner=owner)
    async with client, await client.create(IMAGE) as sandbox:
        await sandbox.files.write("/tmp/port_server.py", SERVER.read_bytes())
        port = free_listen_port()
        await sandbox.processes.start(f"python3 /tmp/port_server.py {port} 127.0.0.1")
        await wait_until_async(lambda: _listening(sandbox, port), timeout_s=30)
        yield sandbox, port


async def test_http_through_the_facade(served: tuple[AsyncSandbox, int]) -> None:
    sandbox, port = served
    server = sandbox.port(port)
    seen = (await server.request("GET", "/a/b%20c?x=1&y=%2F", headers={"X-Tool": "t"})).json()
    assert (seen["method"], seen["path"]) == ("GET", "/a/b%20c?x=1&y=%2F")
    assert "authorization" not in seen["headers"]  # the tenant's token stops at the facade
    assert seen["headers"]["x-tool"] == "t"
    assert seen["headers"]["host"] == f"127.0.0.1:{port}"

    payload = hashlib.sha256(b"seed").digest() * (1 << 18)  # 8 MiB
    posted = (await server.request("POST", "/upload", data=payload)).json()
    digest = hashlib.sha256(payload).hexdigest()
    assert (posted["length"], posted["sha256"]) == (len(payload), digest)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 1 << 20):
            yield payload[start : start + (1 << 20)]

    async with server.open("PUT", "/chunked", data=chunks()) as r:
        assert (await r.json())["sha256"] == digest
    async with server.open("GET", f"/download?bytes={24 << 20}") as r:
        assert r.status == 200 and r.content_length == 24 << 20
        received = 0
        async for chunk in r.content.iter_any():
            received += len(chunk)
    assert received == 24 << 20


async def test_url_and_headers_serve_any_client(served: tuple[AsyncSandbox, int]) -> None:
    sandbox, port = served
    assert sandbox.url(port, "/x?y=1") == f"{sandbox.port(port).url}/x?y=1"
    async with aiohttp.ClientSession(headers=sandbox.headers) as http:
        async with http.delete(URL(sandbox.url(port, "/item/7?force=1"), encoded=True)) as r:
            assert r.status == 200
            assert (await r.json())["path"] == "/item/7?force=1"
        async with http.get(sandbox.url(port)) as r:
            assert r.status == 200 and (await r.json())["path"] == "/"


async def test_the_blocking_sdk_reaches_a_port(
    served: tuple[AsyncSandbox, int], stack: Stack, owner: str
) -> None:
    sandbox, port = served

    def blocking() -> dict[str, object]:
        with Sandman(
            stack.url, stack.token, owner=owner, lease_s=None, release_on_exit=False
        ) as client:
            box = client.get(sandbox.id)
            assert box.url(port, "/b") == sandbox.url(port, "/b")
            answer: dict[str, object] = box.port(port).request("POST", "/b?x=1", data=b"abc").json()
            return answer

    seen = await anyio.to_thread.run_sync(blocking)
    assert (seen["method"], seen["path"], seen["length"]) == ("POST", "/b?x=1", 3)


async def test_websocket_echo_through_the_tunnel(served: tuple[AsyncSandbox, int]) -> None:
    sandbox, port = served
    async with sandbox.port(port).websocket("/ws", protocols=("chat",)) as ws:
        assert ws.protocol == "chat"
        await ws.send_str("hello")
        assert await ws.receive_str() == "echo:hello"
        big = bytes(range(256)) * 1024  # a frame with a 64-bit length
        await ws.send_bytes(big)
        assert await ws.receive_bytes() == big[::-1]
        await ws.close(code=4001)
        assert ws.close_code == 4001


async def test_refusals_are_typed(served: tuple[AsyncSandbox, int]) -> None:
    sandbox, _ = served
    nothing = free_listen_port()
    with pytest.raises(ServerError) as refused:
        await sandbox.port(nothing).request("GET", "/")
    assert (refused.value.reason, refused.value.status) == ("port_not_listening", 502)
    with pytest.raises(ServerError) as upgrade:
        async with sandbox.port(nothing).websocket("/ws"):
            pass
    assert upgrade.value.reason == "port_not_listening"
    with pytest.raises(InvalidRequest) as reserved:
        await sandbox.port(DAEMON_PORT).request("GET", "/v1/info")
    assert reserved.value.reason == "port_reserved"
    with pytest.raises(ValueError, match="from 1 to 65535"):
        sandbox.port(0)


@pytest.mark.parametrize(
    ("tail", "status", "reason"),
    [
        ("0/", 400, "invalid_port"),
        ("65536/", 400, "invalid_port"),
        ("08080/", 400, "invalid_port"),
        ("http/", 400, "invalid_port"),
        ("", 400, "invalid_port"),
        ("{daemon}/v1/exec", 400, "port_reserved"),
        ("{port}/a/../../../exec", 400, "invalid_path"),
        ("{port}/%2e%2E/%2e%2e/info", 400, "invalid_path"),
        ("{port}/.%2E/claim", 400, "invalid_path"),
        ("{port}/a%2Fb", 400, "invalid_path"),
        ("{port}/a%5cb", 400, "invalid_path"),
        ("{port}//twice", 400, "invalid_path"),
    ],
)
async def test_hostile_paths_are_refused(
    served: tuple[AsyncSandbox, int], stack: Stack, tail: str, status: int, reason: str
) -> None:
    sandbox, port = served
    target = f"{stack.url}/v1/sandboxes/{sandbox.id}/ports/"
    target += tail.format(daemon=DAEMON_PORT, port=port)
    http = aiohttp.ClientSession(headers=sandbox.headers)
    async with http, http.get(URL(target, encoded=True)) as r:
        assert r.status == status, await r.text()
        assert (await r.json())["error"]["reason"] == reason
        assert r.headers["x-sandman-reason"] == reason


async def test_a_port_needs_the_tenant_and_its_sandbox(
    served: tuple[AsyncSandbox, int], stack: Stack
) -> None:
    sandbox, port = served
    url = sandbox.url(port)
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as r:
            assert r.status == 401
        other = {"Authorization": f"Bearer {stack.tokens['other']}"}
        async with http.get(url, headers=other) as r:
            assert r.status == 404
            assert (await r.json())["error"]["reason"] == "sandbox_not_found"
        big = io.BytesIO(b"x" * 10)
        async with http.post(url, data=big, headers=sandbox.headers) as r:
            assert r.status == 200
