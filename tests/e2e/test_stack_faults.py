"""The stack's hooks for failure tests (``devstack.stack.Stack``), on real processes: a
facade stopped with SIGSTOP, a killed facade brought back, and two controllers electing a
leader, the standby taking over when the leader is SIGKILLed."""

from __future__ import annotations

import signal
import time

import aiohttp
import pytest

from tests.support.stack import RunningStack
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

STACK = {"profile": "ci", "controller_replicas": 2}


async def _ready_sandbox(url: str, token: str, owner: str) -> dict:
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(url, headers=headers) as http:
        spec = {"image": "registry.example/tasks/demo:1", "owner": owner}
        async with http.post("/v1/sandboxes", json=spec) as r:
            assert r.status in (200, 201), await r.text()
            sid = (await r.json())["id"]
        async with http.get(f"/v1/sandboxes/{sid}", params={"wait": "ready"}) as r:
            view = await r.json()
        async with http.delete("/v1/sandboxes", params={"owner": owner}) as r:
            assert r.status < 300, await r.text()
    assert view["state"] == "ready", view
    return dict(view)


async def test_a_stopped_facade_is_restarted_promptly(stack: RunningStack, owner: str) -> None:
    # A SIGSTOPped process holds SIGTERM until continued: stopping it must not wait out
    # the 20 s kill timeout.
    stack.send_signal("facade-2", signal.SIGSTOP)
    started = time.monotonic()
    await stack.restart("facade-2")
    assert time.monotonic() - started < 10
    await _ready_sandbox(stack.urls[1], stack.token, owner)


async def test_a_killed_facade_comes_back_on_its_port(stack: RunningStack, owner: str) -> None:
    assert await stack.kill("facade-2") == -signal.SIGKILL
    await stack.start_again("facade-2")
    await _ready_sandbox(stack.urls[1], stack.token, owner)


async def test_standby_controller_leads_after_the_leader_is_killed(
    stack: RunningStack, owner: str
) -> None:
    leader = await wait_until_async(stack.leader, timeout_s=20, what="a leader")
    standby = ({"controller", "controller-2"} - {leader}).pop()
    await stack.kill(leader)

    async def standby_leads() -> str:
        assert await stack.leader() == standby
        return standby

    await wait_until_async(standby_leads, timeout_s=20, interval_s=0.2)
    await _ready_sandbox(stack.url, stack.token, owner)  # the new leader binds
    await stack.start_again(leader)  # back as the standby
    assert await stack.leader() == standby
