"""A node is deleted under a ready sandbox: the trainer sees ``terminated`` / ``node_lost``
(not a bare 404), and tool calls are refused with 410 instead of timing out."""

from __future__ import annotations

import sys

import aiohttp
import anyio
import pytest

from tests.support.stack import RunningStack
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_sandbox_lost_with_its_node(stack: RunningStack, owner: str) -> None:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with aiohttp.ClientSession(stack.url, headers=headers) as http:
        spec = {"image": "registry.example/tasks/demo:1", "owner": owner}
        async with http.post("/v1/sandboxes", json=spec) as r:
            sid = (await r.json())["id"]
        async with http.get(f"/v1/sandboxes/{sid}", params={"wait": "ready"}) as r:
            node = (await r.json())["node"]
        fault = [
            sys.executable, "-m", "simcluster", "fault",
            "--kubeconfig", str(stack.stack.kubeconfig), "node-delete", f"node={node}",
        ]  # fmt: skip
        done = await anyio.run_process(fault, check=False)
        assert done.returncode == 0, done.stderr
        params = {"wait": "final", "timeout_s": "20"}
        async with http.get(f"/v1/sandboxes/{sid}", params=params) as r:
            assert r.status == 200, await r.text()

        async def lost_with_its_node() -> dict:
            # the node's deletion may reach the facade after the pod's
            async with http.get(f"/v1/sandboxes/{sid}") as r:
                lost = await r.json()
            assert (lost["state"], lost["reason"]) == ("terminated", "node_lost"), lost
            return lost

        await wait_until_async(lost_with_its_node, interval_s=0.2)
        async with http.post(f"/v1/sandboxes/{sid}/exec", json={"command": "true"}) as r:
            assert r.status == 410
