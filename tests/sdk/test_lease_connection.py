"""The owner lease is renewed while the client's connection pool is full of long-polls.

Why: a trainer waiting on more sandboxes than its pool has connections (256 by default; the
soak's trainers wait on ~400 each) queued its lease renewals behind 20-s long-polls; the
renewals timed out, the lease lapsed, and the facade deleted every sandbox of the owner
(docs/benchmarks/faults-soak.md, "Soak"). A scripted aiohttp server on loopback: waits hang
until the test ends, the lease route answers at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sandman import AsyncSandman, Limits

pytestmark = pytest.mark.anyio
PENDING = {"id": "sb-1", "owner": "o", "class": "tiny", "image": "img", "state": "pending"}


@contextlib.asynccontextmanager
async def _facade(hold: asyncio.Event, renewals: list[str]) -> AsyncIterator[str]:
    async def sandbox(request: web.Request) -> web.Response:
        if request.query.get("wait") == "ready":
            await hold.wait()
        return web.json_response(PENDING)

    async def lease(request: web.Request) -> web.Response:
        renewals.append(request.match_info["owner"])
        return web.json_response({"owner": "o", "duration_s": 60, "renewed_at": "now"})

    app = web.Application()
    app.router.add_get("/v1/sandboxes/{sid}", sandbox)
    app.router.add_put("/v1/owners/{owner}/lease", lease)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        hold.set()
        await server.close()


@pytest.mark.timeout(30)
async def test_a_lease_renewal_does_not_wait_behind_the_clients_long_polls() -> None:
    hold, renewals = asyncio.Event(), []
    async with _facade(hold, renewals) as url:
        client = AsyncSandman(url, "t" * 20, owner="o", lease_s=None, release_on_exit=False,
                              limits=Limits(max_connections=2))  # fmt: skip
        async with client:
            sandbox = await client.get("sb-1")
            waits = [asyncio.create_task(sandbox.wait_ready(timeout_s=20)) for _ in range(2)]
            try:
                await asyncio.sleep(0.2)  # both long-polls hold the pool's two connections
                assert not any(w.done() for w in waits)
                async with asyncio.timeout(5):
                    status = await client.renew_lease(60)
                assert status.duration_s == 60 and renewals == ["o"]
            finally:
                hold.set()
                for w in waits:
                    w.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
