"""The leader's claims endpoint (controller/claims.py) against simcluster with real
controllers (the process's own ``Controller``, leader election, its HTTP server): Ready pool
pods handed out with ONE SandboxClaim write per batch, partial and empty answers, retries
answered with the same pods, unhealthy pods never handed out, and a leader change that
hands nothing twice."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiohttp
import pytest

from controller.app import Controller
from controller.claims import ClaimService
from controller.view import ClusterView
from devstack.crds import sandbox_claim_crd
from kube import NODES, PODS, KubeClient
from kube.contract import LABEL_CLASS
from kube.errors import AlreadyExists
from kube.pool_contract import CLAIMS_PATH, LABEL_POOL, SANDBOX_CLAIMS
from kube.resources import Resource
from scheduler import Scheduler
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import CONTROLLER_USER, cluster_of, writes_by
from tests.support.metrics import sample
from tests.support.placement import placing_controller
from tests.support.pods import pod
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)
NS, IMAGE, CLASS = "default", "registry.local/task:1", "small"


@pytest.fixture
def cluster_settings() -> ClusterSettings:
    return cluster_of(2, cpu="8", foreign=0.0)


async def _pool_pods(client: KubeClient, names: list[str], node: str = "node-0") -> None:
    with contextlib.suppress(AlreadyExists):
        await client.create(CRDS, sandbox_claim_crd())
    for name in names:
        body = pod(name, **{LABEL_POOL: "prep-1", LABEL_CLASS: CLASS})
        body["spec"]["nodeName"] = node
        await client.create(PODS, body, NS)


def _claims_serving(c: Controller) -> bool:
    return c.claims is not None and c.claims.serving


def _ready(c: Controller, n: int) -> bool:
    return c.claims is not None and c.claims.book.counts((NS, IMAGE, CLASS))["ready"] >= n


async def _ask(
    client: KubeClient, c: Controller, claim: str, count: int, digest: str = "d1"
) -> tuple[int, Any]:
    """A claim as the facade sends it: with a bearer token the test controllers admit
    (the admin's, as the placement tests do)."""
    body = {
        "namespace": NS,
        "image": IMAGE,
        "class": CLASS,
        "count": count,
        "claim": claim,
        "request_digest": digest,
        "owner": "run-1",
        "labels": {"step": "7"},
    }
    async with (
        aiohttp.ClientSession(c.health_url, headers=client.bearer_headers()) as http,
        http.post(CLAIMS_PATH, json=body) as r,
    ):
        return r.status, await r.json()


def _claim_writes(cluster: EmbeddedCluster) -> float:
    return writes_by(cluster, CONTROLLER_USER, resource="sandboxclaims")


async def test_a_batch_is_claimed_with_one_write_and_a_retry_gets_the_same_pods(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    await _pool_pods(client, [f"pool-{i}" for i in range(5)])
    async with placing_controller(cluster, "a") as a:
        await wait_until_async(lambda: _claims_serving(a) and _ready(a, 5), timeout_s=15)
        status, first = await _ask(client, a, "claim-1", 3)
        assert status == 200 and len(first["pods"]) == 3 and not first["replayed"]
        assert _claim_writes(cluster) == 1
        stored = await client.get(SANDBOX_CLAIMS, "claim-1", NS)
        assert stored["spec"]["pods"] == first["pods"]
        assert (stored["spec"]["owner"], stored["spec"]["labels"]) == ("run-1", {"step": "7"})
        # The facade retries (same Idempotency-Key): the same pods, no write.
        status, again = await _ask(client, a, "claim-1", 3)
        assert (status, again["pods"], again["replayed"]) == (200, first["pods"], True)
        status, reused = await _ask(client, a, "claim-1", 3, digest="other")
        assert (status, reused["reason"]) == (409, "idempotency_key_reused")
        # The pool is short: the rest, then nothing (and no write for nothing).
        status, second = await _ask(client, a, "claim-2", 3)
        assert len(second["pods"]) == 2 and not set(second["pods"]) & set(first["pods"])
        status, third = await _ask(client, a, "claim-3", 3)
        assert (status, third["pods"]) == (200, [])
        assert _claim_writes(cluster) == 2
        assert a.claims is not None
        assert (a.claims.counts["hit"], a.claims.counts["partial"]) == (1, 1)
        # Each of the 5 handed-out pods' time in the pool, observed once.
        registry = a.metrics.registry
        assert sample(registry, "sandman_pool_time_in_pool_seconds_count") == 5
        assert 0 < sample(registry, "sandman_pool_time_in_pool_seconds_sum") < 5 * 60
        assert a.claims.counts["miss"] == 1


async def test_pods_on_a_cordoned_node_or_not_ready_are_never_handed_out(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    await _pool_pods(client, ["pool-a", "pool-b"], node="node-0")
    await _pool_pods(client, ["pool-c"], node="node-1")
    async with placing_controller(cluster, "a") as a:
        await wait_until_async(lambda: _claims_serving(a) and _ready(a, 3), timeout_s=15)
        await client.patch(NODES, "node-0", {"spec": {"unschedulable": True}})
        await wait_until_async(lambda: not _ready(a, 2), timeout_s=10)
        status, answer = await _ask(client, a, "claim-1", 3)
        assert (status, answer["pods"]) == (200, ["pool-c"])


async def test_a_new_leader_hands_out_nothing_its_predecessor_did(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    await _pool_pods(client, [f"pool-{i}" for i in range(4)])
    async with placing_controller(cluster, "a") as a:
        await wait_until_async(lambda: _claims_serving(a) and _ready(a, 4), timeout_s=15)
        _, first = await _ask(client, a, "claim-1", 3)
        assert len(first["pods"]) == 3
        async with placing_controller(cluster, "b") as b:
            a.stop()  # releases the Lease: b takes over
            await wait_until_async(lambda: _claims_serving(b), timeout_s=15)
            _, again = await _ask(client, b, "claim-1", 3)  # a retry reaches the new leader
            assert (again["pods"], again["replayed"]) == (first["pods"], True)
            _, rest = await _ask(client, b, "claim-2", 4)
            assert rest["pods"] == sorted(set(f"pool-{i}" for i in range(4)) - set(first["pods"]))
    assert _claim_writes(cluster) == 2


async def test_a_claim_without_the_facades_token_is_refused(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    """Claims hand out sandboxes: the placement endpoint's caller check guards them too."""
    await _pool_pods(client, ["pool-0"])
    async with placing_controller(cluster, "a") as a:
        await wait_until_async(lambda: _claims_serving(a) and _ready(a, 1), timeout_s=15)
        async with (
            aiohttp.ClientSession(a.health_url) as http,
            http.post(CLAIMS_PATH, json={"namespace": NS}) as r,
        ):
            assert r.status == 401, await r.text()
        assert _claim_writes(cluster) == 0


async def test_a_failed_read_of_the_claims_is_retried_not_the_end_of_leadership(
    cluster: EmbeddedCluster, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A new leader reads every claim before serving; an API error on that read (a 429 in a
    burst) is retried until it lands — it once ended the leader's task group, binder and
    placements included, and the controller with it."""
    with contextlib.suppress(AlreadyExists):
        await client.create(CRDS, sandbox_claim_crd())
    once = client.with_rate_limit(0, 1, max_attempts=1)
    service = ClaimService(once, ClusterView(once, Scheduler()))
    fault = {"kind": "api-errors", "verb": "list", "rate": 1.0, "code": 429}
    await client.request("POST", "/admin/faults", body=fault)
    with caplog.at_level(logging.WARNING, logger="controller.claims"):
        reading = asyncio.create_task(service._list_claims())
        try:
            await wait_until_async(
                lambda: (
                    sum("listing SandboxClaims failed" in r.message for r in caplog.records) >= 2
                ),
                timeout_s=15,
            )
            assert not reading.done()
        finally:
            await client.request("POST", "/admin/faults", body={"kind": "clear"})
        async with asyncio.timeout(15):
            assert await reading == []
