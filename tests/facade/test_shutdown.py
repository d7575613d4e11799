"""Stopping a facade ends its parked waits with a clear answer, and within a bound.

A ``GET ?wait=`` may be parked for up to the maximum wait (600 s); a facade told to stop must
not sit on it (aiohttp alone would wait its shutdown timeout for the handler, then cut the
connection). Each parked wait answers 503 ``facade_stopping`` with a Retry-After — the
SDK's retry then reaches another replica — and the facade is gone in about a second.
Idle keep-alive connections are closed after ``FacadeSettings.keepalive_s``.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from facade.app import FacadeSettings
from tests.support.facade import LiveFacade
from tests.support.kube import FAST
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]
IMAGE = "registry.example/tasks/demo:1"


@pytest.fixture
def facade_settings() -> FacadeSettings:
    return FacadeSettings(port=0, client=FAST, keepalive_s=0.5)


def _waiters(live: LiveFacade) -> float:
    return live.facade.metrics.registry.get_sample_value("sandman_facade_waiters") or 0.0


async def test_stop_answers_parked_waits_and_is_quick(live: LiveFacade) -> None:
    async with live.http.post("/v1/sandboxes", json={"image": IMAGE, "owner": "r"}) as r:
        assert r.status == 201
        sid = (await r.json())["id"]  # no nodes: it stays pending, the wait stays parked

    async def wait() -> tuple[int, str | None, dict[str, str]]:
        params = {"wait": "ready", "timeout_s": "600"}
        async with live.http.get(f"/v1/sandboxes/{sid}", params=params) as r:
            return r.status, r.headers.get("Retry-After"), await r.json()

    parked = [asyncio.create_task(wait()) for _ in range(3)]
    await wait_until_async(lambda: _waiters(live) == 3, timeout_s=5)
    started = time.monotonic()
    await live.facade.stop()
    assert time.monotonic() - started < 3
    for status, retry_after, body in await asyncio.gather(*parked):
        assert status == 503 and retry_after == "1", body
        assert body["error"]["reason"] == "facade_stopping"


async def test_idle_keepalive_connections_are_closed_after_the_stated_timeout(
    live: LiveFacade,
) -> None:
    host, port = live.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"keep-alive" not in head.lower()
        await reader.readexactly(len(b"ok\n"))
        idle_since = time.monotonic()
        async with asyncio.timeout(5):
            assert await reader.read() == b""  # closed by the facade
        assert time.monotonic() - idle_since >= 0.4  # not at once: after the idle timeout
    finally:
        writer.close()
