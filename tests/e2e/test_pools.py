"""Pools end to end, as real processes (simcluster's process runtime: every pool pod runs a
real pool daemon; two controllers electing a leader; two facade replicas): batches sent to
both facades at once while the leading controller is SIGKILLed mid-claim. Every request is
answered in full (what the pool could not give, or gave while no leader answered, is cold),
no sandbox is handed to two requests, every pool pod is named by at most one claim, each
claimed sandbox runs the calls of its own request only, a retry through the other replica
gets the same sandboxes, and the claims' owner, labels and expiry survive a facade restart.

The pool is announced through the SDK (``prepare(..., sandboxes=True)``) and filled by the
leading controller, as a trainer's would be."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import aiohttp
import pytest

from kube import PODS, KubeClient
from kube.pool_contract import CLAIMS_PATH, LABEL_POOL, SANDBOX_CLAIMS
from sandman import AsyncSandman
from sandman.wire.facade import DEFAULT_CLASS
from tests.support.kube import FAST
from tests.support.stack import RunningStack
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

STACK = {"profile": "dev", "controller_replicas": 2, "facade_replicas": 2}
IMAGE = "registry.example/tasks/pooled:1"
POOL = 8
BATCH = 3


async def _batch(url: str, token: str, key: str, owner: str, step: int) -> list[dict[str, Any]]:
    """One batch of ``BATCH`` with its own env and label; retried (same key) on a 5xx or a
    dropped connection, as the SDK retries an idempotent create."""
    spec = {
        "image": IMAGE,
        "owner": owner,
        "env": {"STEP": str(step)},
        "labels": {"step": str(step)},
    }
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
    for attempt in itertools.count():
        try:
            async with (
                aiohttp.ClientSession(url, headers=headers) as http,
                http.post("/v1/batches", json={"spec": spec, "count": BATCH}) as r,
            ):
                if r.status >= 500 and attempt < 5:
                    await asyncio.sleep(0.5)
                    continue
                assert r.status in (200, 201), await r.text()
                answer = await r.json()
        except aiohttp.ClientConnectionError:
            if attempt >= 5:
                raise
            await asyncio.sleep(0.5)
            continue
        assert not answer["failed"], answer
        return list(answer["sandboxes"])
    raise AssertionError("unreachable")


async def _pool_ready(client: KubeClient, namespace: str) -> bool:
    pods = (await client.list(PODS, namespace, label_selector=LABEL_POOL))["items"]
    ready = [
        p
        for p in pods
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or ()
        )
    ]
    return len(ready) == POOL


async def _claims_served(url: str, headers: dict[str, str], namespace: str) -> bool:
    """The controller at ``url`` serves claims (its predecessor waited out): a claim that
    may only replay (it claims nothing) answered 200, not 503."""
    body = {
        "namespace": namespace, "image": IMAGE, "class": DEFAULT_CLASS, "count": 1,
        "claim": "probe", "request_digest": "probe", "replay_only": True,
    }  # fmt: skip
    try:
        async with (
            aiohttp.ClientSession(url, headers=headers) as http,
            http.post(CLAIMS_PATH, json=body) as r,
        ):
            return r.status == 200
    except aiohttp.ClientError:
        return False


async def test_two_replicas_claim_while_the_leader_dies_and_nothing_is_handed_twice(
    stack: RunningStack, owner: str
) -> None:
    running = stack.stack
    namespace = running.namespace()
    urls, token = stack.urls, stack.token
    headers = {"Authorization": f"Bearer {token}"}
    controller_url = dict(zip(running.controllers(), running.controller_urls, strict=True))
    async with (
        await KubeClient.connect(FAST, kubeconfig=str(running.kubeconfig)) as client,
        await KubeClient.connect(FAST, kubeconfig=running.kubeconfig_of("facade")) as facade_id,
    ):
        # The pool as a trainer makes it: announced, filled by the leading controller.
        announcer = AsyncSandman(urls[0], token, owner=owner, lease_s=None, release_on_exit=False)
        async with announcer:
            await announcer.prepare([(IMAGE, POOL)], sandboxes=True, class_=DEFAULT_CLASS)
        pool_names: set[str] = set()
        leader = ""
        try:
            await wait_until_async(lambda: _pool_ready(client, namespace), timeout_s=90)
            pods = (await client.list(PODS, namespace, label_selector=LABEL_POOL))["items"]
            pool_names = {p["metadata"]["name"] for p in pods}
            leader = await wait_until_async(stack.leader, timeout_s=20, what="a leader")
            as_facade = facade_id.bearer_headers()

            def serving(name: str) -> Any:
                return lambda: _claims_served(controller_url[name], as_facade, namespace)

            await wait_until_async(serving(leader), timeout_s=20, what="the leader's claims")
            keys = [f"{owner}-{i}" for i in range(8)]

            def wave(indices: range) -> list[Any]:
                return [_batch(urls[i % 2], token, keys[i], owner, i) for i in indices]

            # Wave 0 on both replicas; wave 1 with the leader SIGKILLed among its claims;
            # wave 2 once the standby serves.
            results: list[list[dict[str, Any]]] = list(await asyncio.gather(*wave(range(2))))
            *answers, _ = await asyncio.gather(*wave(range(2, 6)), stack.kill(leader))
            results += answers
            standby = ({"controller", "controller-2"} - {leader}).pop()
            await wait_until_async(serving(standby), timeout_s=30, what="the standby's claims")
            results += await asyncio.gather(*wave(range(6, 8)))

            ids = [s["id"] for batch in results for s in batch]
            assert len(ids) == 8 * BATCH and len(set(ids)) == len(ids)  # none handed twice
            pooled = [s for batch in results for s in batch if s["id"] in pool_names]
            assert len(pooled) >= 2 * BATCH, "wave 0 did not take the pool"
            claims = (await client.list(SANDBOX_CLAIMS, namespace))["items"]
            named = [p for c in claims for p in c["spec"]["pods"]]
            assert len(named) == len(set(named))  # no pool pod in two claims
            assert {s["id"] for s in pooled} <= set(named)

            # Each claimed sandbox runs its own request's calls, with its env.
            async with aiohttp.ClientSession(urls[0], headers=headers) as http:
                for i, batch in enumerate(results):
                    for s in batch:
                        if s["id"] not in pool_names:
                            continue
                        assert (s["owner"], s["labels"]) == (owner, {"step": str(i)})
                        async with http.post(
                            f"/v1/sandboxes/{s['id']}/exec", json={"command": "echo $STEP"}
                        ) as r:
                            assert r.status == 200, await r.text()
                            assert (await r.json())["stdout"]["data"] == f"{i}\n"

            # A retry through the other replica: the same sandboxes.
            for i in (0, 1, 7):
                again = await _batch(urls[(i + 1) % 2], token, keys[i], owner, i)
                assert [s["id"] for s in again] == [s["id"] for s in results[i]]

            # Durable: the claims live in Kubernetes; a restarted facade shows them the same.
            await stack.restart("facade-2")
            async with aiohttp.ClientSession(urls[1], headers=headers) as http:
                for s in pooled:
                    async with http.get(f"/v1/sandboxes/{s['id']}") as r:
                        view = await r.json()
                    assert (view["owner"], view["labels"], view["expires_at"]) == (
                        s["owner"],
                        s["labels"],
                        s["expires_at"],
                    )
        finally:
            async with (
                aiohttp.ClientSession(urls[0], headers=headers) as http,
                http.delete("/v1/sandboxes", params={"owner": owner}) as r,
            ):
                assert r.status < 300, await r.text()
            await client.delete_collection(PODS, namespace, label_selector=LABEL_POOL)
            await wait_until_async(
                lambda: _none_left(client, namespace, owner, pool_names), timeout_s=60
            )
            if leader and leader not in running.processes:
                await stack.start_again(leader)  # back as the standby


async def _none_left(client: KubeClient, namespace: str, owner: str, pool: set[str]) -> bool:
    pods = (await client.list(PODS, namespace))["items"]
    return not [
        p
        for p in pods
        if p["metadata"]["name"] in pool
        or (p["metadata"].get("labels") or {}).get("sandman.io/owner") == owner
    ]
