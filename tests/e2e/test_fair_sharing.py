"""Fair sharing and the audit log with real daemons: two tenants on one real facade process.

Tenant ``dev`` may hold two proxied tool calls at once; it holds two slow execs, its third
call is answered 429 ``too_many_calls`` at once, and tenant ``other``'s exec still runs and
answers while ``dev``'s are parked. Then the facade's audit lines (its stderr, the default)
name who ran which command in which sandbox, the refused call with its reason.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from sandman import AsyncSandman
from tests.support.stack import RunningStack as Stack

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
IMAGE = "registry.example/tasks/demo:1"
STACK = {
    "facade_replicas": 1,
    "tenant_config": {"dev": {"max_tool_calls": 2, "max_waits": 2}},
}
SLOW_S = 3


def _audit_lines(stack: Stack) -> list[dict[str, Any]]:
    text = stack.stack.log_path("facade").read_text(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"time"')]


async def _exec(http: aiohttp.ClientSession, sid: str, command: str) -> tuple[int, Any]:
    async with http.post(f"/v1/sandboxes/{sid}/exec", json={"command": command}) as r:
        return r.status, await r.json()


async def test_a_tenant_at_its_cap_delays_no_other_tenant(stack: Stack, owner: str) -> None:
    async with (
        AsyncSandman(stack.url, stack.token, owner=owner) as dev,
        AsyncSandman(stack.url, stack.tokens["other"], owner=owner) as other,
        await dev.create(IMAGE) as a,
        await other.create(IMAGE) as b,
        aiohttp.ClientSession(
            stack.url, headers={"Authorization": f"Bearer {stack.token}"}
        ) as http,
    ):
        calls = [asyncio.create_task(_exec(http, a.id, f"sleep {SLOW_S}")) for _ in range(3)]
        done, slow = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
        (status, body), *_ = [task.result() for task in done]
        assert (status, body["error"]["reason"]) == (429, "too_many_calls"), body
        fast = await b.exec("echo other-tenant")
        assert fast.stdout == "other-tenant\n"
        assert not any(task.done() for task in slow), "answered only after dev's calls ended"
        results = await asyncio.gather(*slow)
        assert [status for status, _ in results] == [200, 200]
        assert (await a.exec("echo free-again")).stdout == "free-again\n"  # the slots came back
        ids = {"dev": a.id, "other": b.id}
    lines = _audit_lines(stack)
    execs = [line for line in lines if line["operation"] == "exec"]
    ran = {(e["tenant"], e["command"], e["status"]) for e in execs}
    assert ("dev", f"sleep {SLOW_S}", 200) in ran
    assert ("other", "echo other-tenant", 200) in ran
    assert ("dev", f"sleep {SLOW_S}", 429) in ran
    over = [e for e in execs if e["status"] == 429]
    assert all(e["reason"] == "too_many_calls" for e in over)
    for e in execs:
        assert e["sandboxes"] == [ids[e["tenant"]]] and e["owner"] == owner
        assert e["command_truncated"] is False and e["bytes_out"] > 0
    slow_lines = [e for e in execs if e["command"] == f"sleep {SLOW_S}" and e["status"] == 200]
    assert len(slow_lines) == 2
    assert all(e["duration_ms"] >= SLOW_S * 1000 for e in slow_lines)
    operations = {line["operation"] for line in lines}
    assert "create" in operations and operations & {"release", "release_owner"}
    assert stack.token not in stack.stack.log_path("facade").read_text()
