"""The lean bind transport: response parsing (Content-Length, chunked, end of stream), and a
real loopback server for kept-alive reuse, connections the server closed, timeouts and
refused connections. Binds over it against simcluster are covered by test_kube_client.py
and test_binder.py (429/Retry-After, 409, 404 through the same retry and error mapping)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from kube import ClientSettings, SendDeadlinePassed, TransportError
from kube.lean import LeanPool, _parse

OK = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
CHUNKED = (
    b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'5\r\n{"a":\r\n2;ext=1\r\n1}\r\n0\r\n\r\n'
)


def test_parse_content_length_and_keep_alive() -> None:
    assert _parse(OK[:-1]) is None
    assert _parse(OK) == (
        (201, {"content-type": "application/json", "content-length": "2"}, b"{}"),
        True,
    )
    closing = OK.replace(b"Content-Length", b"Connection: close\r\nContent-Length")
    assert _parse(closing) is not None and _parse(closing)[1] is False  # type: ignore[index]
    old = OK.replace(b"HTTP/1.1", b"HTTP/1.0")
    assert _parse(old)[1] is False  # type: ignore[index]


def test_parse_chunked_and_end_of_stream() -> None:
    for cut in (10, len(CHUNKED) - 9, len(CHUNKED) - 2):
        assert _parse(CHUNKED[:cut]) is None
    response, keep = _parse(CHUNKED)  # type: ignore[misc]
    assert response[0] == 409 and response[2] == b'{"a":1}' and keep
    unbounded = b"HTTP/1.1 500 Oops\r\n\r\npartial"
    assert _parse(unbounded) is None
    assert _parse(unbounded, eof=True) == ((500, {}, b"partial"), False)
    assert _parse(b"HTTP/1.1 204 No Content\r\n\r\n") == ((204, {}, b""), True)


def test_parse_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not an HTTP"):
        _parse(b"SSH-2.0-OpenSSH\r\n\r\n")
    with pytest.raises(ValueError, match="too large"):
        _parse(b"x" * 70_000)


Answer = Callable[[int, bytes], bytes | None]  # (request number, request) -> reply or hang


@asynccontextmanager
async def server(answer: Answer) -> AsyncIterator[tuple[str, list[int]]]:
    """A plain HTTP/1.1 server on loopback; yields its URL and the requests per connection."""
    per_connection: list[int] = []
    handlers: set[asyncio.Task[None]] = set()
    total = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal total
        handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        per_connection.append(0)
        me = len(per_connection) - 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                request = head + await reader.readexactly(length)
                per_connection[me] += 1
                total += 1
                reply = answer(total, request)
                if reply is None:
                    await reader.read()  # hang until the client gives up
                    return
                writer.write(reply)
                await writer.drain()
                if b"Connection: close" in reply:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", per_connection
    finally:
        srv.close()
        if handlers:
            await asyncio.wait(handlers, timeout=2)


def pool(url: str, limit: int = 4) -> LeanPool:
    return LeanPool(
        url, None, server_hostname=None, limit=limit, connect_timeout=1.0, user_agent="test"
    )


async def post(p: LeanPool, within_s: float = 2.0) -> tuple[int, bytes]:
    code, _, body = await p.request(
        "POST", "/api/v1/namespaces/d/pods/p/binding", {"Accept": "x"}, b"{}", within_s
    )
    return code, body


@pytest.mark.anyio
async def test_connections_are_kept_alive_and_reopened_after_close() -> None:
    def answer(n: int, request: bytes) -> bytes:
        assert request.startswith(b"POST /api/v1/namespaces/d/pods/p/binding HTTP/1.1\r\n")
        assert b"\r\nHost: 127.0.0.1:" in request and request.endswith(b"\r\n\r\n{}")
        if n == 3:
            return OK.replace(b"Content-Length", b"Connection: close\r\nContent-Length")
        return CHUNKED if n == 2 else OK

    async with server(answer) as (url, per_connection):
        p = pool(url)
        assert await post(p) == (201, b"{}")
        assert await post(p) == (409, b'{"a":1}')
        assert await post(p) == (201, b"{}")  # and the server closes this connection
        assert await post(p) == (201, b"{}")
        assert per_connection == [3, 1]
        p.close()


@pytest.mark.anyio
async def test_a_clients_pool_follows_its_settings() -> None:
    """What both clients open (``LeanPool.for_client``): their User-Agent on every request,
    at most ``max_connections`` connections (two concurrent requests share the one)."""
    agents: list[bytes] = []

    def answer(_n: int, request: bytes) -> bytes:
        agents.append(request.split(b"\r\nUser-Agent: ")[1].split(b"\r\n")[0])
        return OK

    settings = ClientSettings(max_connections=1, user_agent="sandman-test/1")
    async with server(answer) as (url, per_connection):
        p = LeanPool.for_client(url, None, None, settings)
        try:
            assert await asyncio.gather(post(p), post(p)) == [(201, b"{}")] * 2
        finally:
            p.close()
    assert agents == [b"sandman-test/1"] * 2
    assert per_connection == [2]


@pytest.mark.anyio
async def test_timeout_and_refused_connection() -> None:
    async with server(lambda _n, _r: None) as (url, _):
        p = pool(url)
        with pytest.raises(TransportError) as slow:
            await post(p, within_s=0.2)
        assert slow.value.sent and "no response within 0.2 s" in str(slow.value)
        p.close()
        one = pool(url, limit=1)  # the second request waits for the slot past its limit
        first, second = await asyncio.gather(
            post(one, within_s=0.3), post(one, within_s=0.1), return_exceptions=True
        )
        assert isinstance(first, TransportError) and first.sent
        assert isinstance(second, TransportError) and second.sent is False
        assert "no connection within 0.1 s" in str(second)
        one.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(TransportError) as refused:
        await post(pool(f"http://127.0.0.1:{free}"))
    assert refused.value.sent is False


@pytest.mark.anyio
async def test_send_by_is_checked_after_waiting_for_a_connection() -> None:
    """A pre-placed create that waited for a slot past its placement's deadline is not sent
    (kube/placement.py: a create must not land after its placement ran out)."""
    async with server(lambda n, _r: None if n == 1 else OK) as (url, per_connection):
        one = pool(url, limit=1)
        loop = asyncio.get_running_loop()
        hung = asyncio.ensure_future(post(one, within_s=0.3))  # holds the only slot 0.3 s
        await asyncio.sleep(0)  # let it take the slot first
        soon = loop.time() + 0.05
        with pytest.raises(SendDeadlinePassed):
            await one.request("POST", "/p", {}, b"{}", 2.0, send_by=soon)
        with pytest.raises(TransportError):
            await hung
        assert sum(per_connection) == 1  # the late create never reached the server
        later = loop.time() + 5.0
        assert (await one.request("POST", "/p", {}, b"{}", 2.0, send_by=later))[0] == 201
        one.close()


@pytest.mark.anyio
async def test_malformed_response_is_a_transport_error() -> None:
    async with server(lambda _n, _r: b"SSH-2.0-OpenSSH\r\n\r\n") as (url, _):
        p = pool(url)
        with pytest.raises(TransportError, match="bad response: not an HTTP") as bad:
            await post(p)
        assert bad.value.sent
        p.close()
