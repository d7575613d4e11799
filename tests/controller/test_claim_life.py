"""A claimed pool sandbox's life on the controller's side (controller/claim_life.py), with a
real controller (election, claims endpoint, garbage collector) on simcluster and pool pods
made through the pool contract (tests/support/pools.py): a claimed pod expires with its
claim, not its pool; an expired owner takes its claimed pods; a claim goes once its pods
have."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from controller.app import Controller
from controller.collector import GCSettings
from facade.config import load_config
from kube import LEASES, PODS, KubeClient
from kube.pool_contract import CLAIMS_PATH, SANDBOX_CLAIMS
from kube.times import format_time
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import cluster_of
from tests.support.facade import NAMESPACE, NAMESPACES, write_config
from tests.support.metrics import sample
from tests.support.placement import placing_controller
from tests.support.pools import install_claims_crd, make_pool
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

IMAGE, CLASS = "registry.local/task:1", "tiny"
GC = GCSettings(interval_s=0.1, claim_grace_s=0.5)


@pytest.fixture
def cluster_settings() -> Any:
    return cluster_of(1, cpu="8", foreign=0.0)


async def _pool(client: KubeClient, tmp_path: Path, c: Controller, n: int) -> list[str]:
    await client.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    await install_claims_crd(client)
    config = load_config(write_config(tmp_path / "facade.yaml", "t" * 16))
    pods = await make_pool(
        client, config, namespace=NAMESPACE, tenant="t1", image=IMAGE, count=n, nodes=["node-0"]
    )
    await wait_until_async(
        lambda: (
            c.claims is not None
            and c.claims.serving
            and c.claims.book.counts((NAMESPACE, IMAGE, CLASS))["ready"] == n
        ),
        timeout_s=20,
    )
    return [p["metadata"]["name"] for p in pods]


async def _claim(
    client: KubeClient, c: Controller, claim: str, count: int, **fields: Any
) -> list[str]:
    body = {
        "namespace": NAMESPACE,
        "image": IMAGE,
        "class": CLASS,
        "count": count,
        "claim": claim,
        "request_digest": "d",
        **fields,
    }
    async with (
        aiohttp.ClientSession(c.health_url, headers=client.bearer_headers()) as http,
        http.post(CLAIMS_PATH, json=body) as r,
    ):
        assert r.status == 200, await r.text()
        pods: list[str] = (await r.json())["pods"]
        return pods


async def _names(client: KubeClient) -> set[str]:
    return {p["metadata"]["name"] for p in (await client.list(PODS, NAMESPACE))["items"]}


async def _left(client: KubeClient, expected: set[str]) -> bool:
    return await _names(client) == expected


def _deleted(c: Controller, reason: str) -> float:
    return sample(c.metrics.registry, "sandman_gc_deletions_total", reason=reason)


async def test_a_claimed_pod_expires_with_its_claim_and_the_claim_goes_with_it(
    cluster: EmbeddedCluster, client: KubeClient, tmp_path: Path
) -> None:
    async with placing_controller(cluster, "a", gc=GC) as c:
        names = await _pool(client, tmp_path, c, 2)  # the pool's expiry: an hour away
        soon = format_time(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
        (claimed,) = await _claim(client, c, "claim-1", 1, owner="run-1", expires_at=soon)
        await wait_until_async(lambda: _deleted(c, "expired") == 1, timeout_s=15)
        assert _deleted(c, "expired") == 1  # the unclaimed one stays: its pool's hour
        await wait_until_async(
            lambda: _left(client, set(names) - {claimed}), timeout_s=10, what="the claimed pod gone"
        )
        await wait_until_async(
            lambda: sample(c.metrics.registry, "sandman_gc_claims_deleted_total") == 1,
            timeout_s=15,
        )
        assert (await client.list(SANDBOX_CLAIMS, NAMESPACE))["items"] == []


async def test_an_expired_owner_takes_its_claimed_pods(
    cluster: EmbeddedCluster, client: KubeClient, tmp_path: Path
) -> None:
    async with placing_controller(cluster, "a", gc=GC) as c:
        names = await _pool(client, tmp_path, c, 3)
        mine = await _claim(client, c, "claim-1", 2, owner="crashed")
        lease = {
            "metadata": {"name": "crashed", "labels": {"sandman.io/owner": "crashed"}},
            "spec": {"holderIdentity": "crashed", "leaseDurationSeconds": 1},
        }
        await client.create(LEASES, lease, NAMESPACE)
        await wait_until_async(lambda: _deleted(c, "owner-expired") == 2, timeout_s=15)
        await wait_until_async(lambda: _left(client, set(names) - set(mine)), timeout_s=10)


async def test_a_claims_expiry_holds_across_a_controller_restart(
    cluster: EmbeddedCluster, client: KubeClient, tmp_path: Path
) -> None:
    """Durable: the expiry lives in the SandboxClaim; a controller started after the claim
    was written (the first one gone) reads it from its watch and collects on time."""
    async with placing_controller(cluster, "a", gc=GC) as a:
        names = await _pool(client, tmp_path, a, 2)
        soon = format_time(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2))
        (claimed,) = await _claim(client, a, "claim-1", 1, owner="run-1", expires_at=soon)
    async with placing_controller(cluster, "b", gc=GC) as b:
        await wait_until_async(lambda: _deleted(b, "expired") == 1, timeout_s=20)
        await wait_until_async(lambda: _left(client, set(names) - {claimed}), timeout_s=10)
