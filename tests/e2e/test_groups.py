"""Groups end to end: ``create_many(..., group=...)`` → ``POST /v1/batches`` with a group →
pods annotated with the group and its size → the real controller places them all or
nothing, on as few nodes as fit (one pull per group) → Ready; a group that cannot fit stays
pending as a whole, every member saying why."""

from __future__ import annotations

import aiohttp
import pytest

from sandman import AsyncSandman, Unschedulable
from tests.support.stack import RunningStack as Stack
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
IMAGE = "registry.example/tasks/demo:1"


async def test_a_group_lands_on_one_node(stack: Stack, owner: str) -> None:
    async with AsyncSandman(stack.url, stack.token, owner=owner) as client:
        sandboxes = await client.create_many(12, IMAGE, group="grpo-t1", timeout_s=60)
        assert len(sandboxes) == 12
        assert len({s.view.node for s in sandboxes}) == 1, [s.view.node for s in sandboxes]


async def test_a_group_that_cannot_fit_stays_pending_as_a_whole(stack: Stack, owner: str) -> None:
    # 3 dev nodes of 30 pods each (some taken by foreign pods): 100 never fit together.
    async with AsyncSandman(stack.url, stack.token, owner=owner) as client:
        sandboxes = await client.create_many(100, IMAGE, group="too-big", wait=False)

        async def all_unschedulable() -> bool:
            views = [s async for s in client.list()]
            assert len(views) == 100
            assert all(v.view.node is None for v in views), "a member was placed"
            return all(v.view.reason == "unschedulable" for v in views)

        await wait_until_async(all_unschedulable, timeout_s=30, interval_s=0.5)
        sandbox = sandboxes[0]
        with pytest.raises(Unschedulable) as info:
            await sandbox.wait_ready(timeout_s=1)
        assert "placed together or not at all" in info.value.message


async def test_a_bad_group_name_is_400(stack: Stack, owner: str) -> None:
    headers = {"Authorization": f"Bearer {stack.token}"}
    spec = {"image": IMAGE, "owner": owner}
    async with aiohttp.ClientSession(stack.url, headers=headers) as http:
        for group in ("", "Upper", "-x", "a" * 64, "a/b", 7):
            body = {"spec": spec, "count": 2, "group": group}
            async with http.post("/v1/batches", json=body) as r:
                answer = await r.json(content_type=None)
            assert r.status == 400 and answer["error"]["reason"] == "invalid_request", group
