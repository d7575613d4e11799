"""A batch create of 500 sandboxes in one request, on 20 virtual nodes: every one Ready,
exactly one pod each, then one release for the whole owner leaves nothing behind."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.support.stack import RunningStack

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
STACK = {"profile": "ci", "nodes": 20}
COUNT = 500


async def _states(http: aiohttp.ClientSession, owner: str) -> dict[str, str]:
    states: dict[str, str] = {}
    params = {"owner": owner, "limit": "1000"}
    async with http.get("/v1/sandboxes", params=params) as r:
        for item in (await r.json())["items"]:
            states[item["id"]] = item["state"]
    return states


async def test_batch_of_500_all_ready_then_released(stack: RunningStack, owner: str) -> None:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with aiohttp.ClientSession(stack.url, headers=headers) as http:
        batch = {"spec": {"image": "registry.example/tasks/demo:1", "owner": owner}, "count": COUNT}
        async with http.post("/v1/batches", json=batch, headers={"Idempotency-Key": owner}) as r:
            assert r.status == 201, await r.text()
            body = await r.json()
        assert body["failed"] == [] and len({s["id"] for s in body["sandboxes"]}) == COUNT
        deadline = time.monotonic() + 90
        while (states := await _states(http, owner)) and set(states.values()) != {"ready"}:
            assert time.monotonic() < deadline, f"not all ready: {sorted(states.values())[:5]}"
            await asyncio.sleep(0.5)
        assert len(states) == COUNT
        assert all(s["attempt"] == 0 for s in body["sandboxes"])
        async with http.delete("/v1/sandboxes", params={"owner": owner}) as r:
            assert (await r.json())["released"] == COUNT
        deadline = time.monotonic() + 60
        while await _states(http, owner):
            assert time.monotonic() < deadline, "sandboxes left after release"
            await asyncio.sleep(0.5)
