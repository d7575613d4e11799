"""Connections are a bounded resource: idle, slow and excess clients cannot starve the daemon.

300 idle connections once exhausted the daemon's descriptors and its readiness probe failed;
a client sending its headers a byte at a time (slowloris) held a connection forever. Now
connections are capped (an arrival at the cap evicts the longest-idle connection, so
``/healthz`` keeps answering), and a connection that sends nothing, dribbles its head or its
body, or idles between requests past the keep-alive timeout is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import time
from collections.abc import Iterator

import aiohttp
import pytest

from daemon.sandbox.settings import DaemonSettings
from tests.support.daemon import DaemonProcess, start_daemon
from tests.support.wait import wait_until

pytestmark = pytest.mark.anyio

FAST = ["--header-timeout-s", "0.5", "--keepalive-timeout-s", "1", "--body-timeout-s", "0.5"]


def _address(daemon: DaemonProcess) -> tuple[str, int]:
    host, port = daemon.url.removeprefix("http://").split(":")
    return host, int(port)


def _closed_by_server(sock: socket.socket, within_s: float) -> tuple[float, bytes]:
    """(seconds until the server closed the connection, what it sent before closing)."""
    started = time.monotonic()
    sock.settimeout(within_s)
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(4096):
            received += chunk
    return time.monotonic() - started, received


@contextlib.contextmanager
def _sockets(daemon: DaemonProcess, n: int) -> Iterator[list[socket.socket]]:
    opened = []
    try:
        for _ in range(n):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(_address(daemon))
            opened.append(sock)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def _low_fd_limit() -> None:  # in the daemon's process, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))


async def test_idle_connections_cannot_starve_the_readiness_probe(tmp_path: object) -> None:
    daemon = start_daemon(cwd=str(tmp_path), preexec_fn=_low_fd_limit)
    try:
        with _sockets(daemon, 300):
            await asyncio.sleep(0.5)  # let the daemon accept what it will (a span, not a condition)
            timeout = aiohttp.ClientTimeout(total=5)
            headers = {"Authorization": f"Bearer {daemon.token}"}
            async with aiohttp.ClientSession(timeout=timeout) as session:
                for _ in range(5):
                    async with session.get(daemon.url + "/healthz") as r:
                        assert r.status == 200
                async with session.get(daemon.url + "/v1/info", headers=headers) as r:
                    assert r.status == 200
    finally:
        assert daemon.stop() == 0


@pytest.mark.parametrize("daemon_args", [FAST])
@pytest.mark.parametrize(
    "sent",
    [b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"],
    ids=["nothing", "half a head"],
)
async def test_a_client_slow_to_send_its_head_is_closed(daemon: DaemonProcess, sent: bytes) -> None:
    with socket.create_connection(_address(daemon)) as sock:
        sock.sendall(sent)
        elapsed, reply = _closed_by_server(sock, within_s=5)
    assert elapsed < 3
    if sent:
        assert reply.startswith(b"HTTP/1.1 408"), reply


@pytest.mark.parametrize("daemon_args", [FAST])
async def test_a_dribbled_head_is_closed_at_the_header_deadline(daemon: DaemonProcess) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    started = time.monotonic()
    with socket.create_connection(_address(daemon)) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for byte in head:  # a byte every 50 ms: each read is quick, the head never ends
                sock.sendall(bytes([byte]))
                await asyncio.sleep(0.05)
                if time.monotonic() - started > 4:
                    break
        _closed_by_server(sock, within_s=1)
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("daemon_args", [FAST])
async def test_a_dribbled_body_is_closed(daemon: DaemonProcess) -> None:
    request = (
        f"POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {daemon.token}\r\n"
        "Content-Length: 100\r\n\r\n{"
    ).encode()
    with socket.create_connection(_address(daemon)) as sock:
        sock.sendall(request)
        elapsed, reply = _closed_by_server(sock, within_s=5)
    assert elapsed < 3
    assert reply.startswith(b"HTTP/1.1 408"), reply
    assert b"body_timeout" in reply


@pytest.mark.parametrize("daemon_args", [FAST])
async def test_keep_alive_connections_idle_out(daemon: DaemonProcess) -> None:
    with socket.create_connection(_address(daemon)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        elapsed, _ = _closed_by_server(sock, within_s=5)
    assert 0.5 < elapsed < 3


async def test_the_keep_alive_timeout_outlasts_an_agents_think_time() -> None:
    """Trainers reach a daemon through pooled connections; the next tool call of an agent that
    thought for minutes must find its connection open (docs/daemon-api.md states the value)."""
    assert DaemonSettings(token="t").keepalive_timeout_s >= 300


@pytest.mark.parametrize("daemon_args", [["--max-connections", "8"]])
async def test_connections_past_the_cap_evict_the_longest_idle(daemon: DaemonProcess) -> None:
    with _sockets(daemon, 30) as idle:
        wait_until(lambda: _open_count(idle) <= 8, timeout_s=10)
        async with aiohttp.ClientSession() as session, session.get(daemon.url + "/healthz") as r:
            assert r.status == 200


def _open_count(sockets: list[socket.socket]) -> int:
    """How many of these connections the server has not closed (a closed one reads EOF)."""
    count = 0
    for sock in sockets:
        try:
            if sock.recv(1, socket.MSG_PEEK) != b"":
                count += 1
        except BlockingIOError:
            count += 1
        except OSError:
            pass
    return count
