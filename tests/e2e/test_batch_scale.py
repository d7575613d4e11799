"""A batch create of 500 sandboxes in one request, on 20 virtual nodes: every one Ready,
exactly one pod each (counted at the API server), then one release for the whole owner
leaves nothing behind."""

from __future__ import annotations

from collections import Counter

import aiohttp
import pytest

from kube import PODS, KubeClient
from kube.contract import ANNOTATION_REPLACES, LABEL_OWNER, LABEL_SANDBOX
from tests.support.kube import FAST
from tests.support.stack import RunningStack
from tests.support.wait import wait_until_async

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
        ids = {s["id"] for s in body["sandboxes"]}
        assert body["failed"] == [] and len(ids) == COUNT

        async def all_ready() -> dict[str, str]:
            states = await _states(http, owner)
            assert states and set(states.values()) == {"ready"}, Counter(states.values())
            return states

        states = await wait_until_async(all_ready, timeout_s=90, interval_s=0.5)
        assert set(states) == ids
        # Exactly one pod each, as the API server has them (every namespace): no sandbox
        # without a pod, none with two, none replaced by a second attempt.
        config = str(stack.stack.kubeconfig)
        async with await KubeClient.connect(FAST, kubeconfig=config) as kube:
            pods = (await kube.list(PODS, label_selector=f"{LABEL_OWNER}={owner}"))["items"]
        per_sandbox = Counter(p["metadata"]["labels"][LABEL_SANDBOX] for p in pods)
        assert set(per_sandbox) == ids
        assert {sid: n for sid, n in per_sandbox.items() if n != 1} == {}
        replacements = [
            p["metadata"]["name"]
            for p in pods
            if ANNOTATION_REPLACES in (p["metadata"].get("annotations") or {})
        ]
        assert replacements == []
        async with http.delete("/v1/sandboxes", params={"owner": owner}) as r:
            assert (await r.json())["released"] == COUNT

        async def none_left() -> bool:
            left = await _states(http, owner)
            assert not left, f"{len(left)} sandboxes left after release"
            return True

        await wait_until_async(none_left, timeout_s=60, interval_s=0.5)
