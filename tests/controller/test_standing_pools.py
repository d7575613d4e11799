"""Standing pools against simcluster with real controllers (the process's own ``Controller``)
and the facade's own writer of the pool objects (facade/standing.py): the pool is filled to
min, refilled after claims under new slot numbers, never past max; a restart mid-fill does
not double it; removing it from the configuration deletes its unclaimed pods and leaves the
claimed ones; and the filler stops at the tenant's limit."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controller.pools import PoolSettings
from facade.podspec import DaemonDelivery, SandboxClass
from facade.standing import StandingPools, StandingSettings, standing_name
from facade.tenancy import StandingPool, Tenant
from facade.tokens import TokenMinter
from kube import PODS, KubeClient
from kube.contract import LABEL_SANDBOX
from kube.pool_contract import LABEL_POOL, SANDBOX_CLAIMS, pool_slot
from kube.preparation_contract import IMAGE_PREPARATIONS
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import cluster_of, writes_by
from tests.support.metrics import sample
from tests.support.placement import placing_controller
from tests.support.pools import NS, install_claims_crd, install_preparation_crd, pool_pods
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(150)]

IMAGE = "registry.local/base:1"
POOL = StandingPool(IMAGE, "tiny", min=3, max=5)
NAME = standing_name(POOL)
FAST_FILL = PoolSettings(qps=100, burst=20, interval_s=0.1, status_interval_s=0.2)
POOLS_USER = PoolSettings().identity


@pytest.fixture
def cluster_settings() -> ClusterSettings:
    return cluster_of(2, cpu="8", foreign=0.0)


def _tenant(*pools: StandingPool, limit: int = 50) -> Tenant:
    return Tenant("t1", NS, max_sandboxes=limit, create_rate_per_s=10, create_burst=10, pools=pools)


async def _apply(client: KubeClient, tenant: Tenant) -> StandingPools:
    """What every facade replica does at start: the tenant's pools as objects."""
    await install_preparation_crd(client)
    await install_claims_crd(client)
    standing = StandingPools(
        client,
        [tenant],
        {"tiny": SandboxClass("tiny")},
        DaemonDelivery("host-path"),
        TokenMinter(b"s" * 48),
        StandingSettings(),
    )
    assert await standing.apply_all()
    return standing


async def _claim(client: KubeClient, name: str, pods: list[str]) -> None:
    claim = {
        "apiVersion": SANDBOX_CLAIMS.api_version,
        "kind": SANDBOX_CLAIMS.kind,
        "metadata": {"name": name, "labels": {LABEL_POOL: NAME}},
        "spec": {"pool": NAME, "image": IMAGE, "class": "tiny", "pods": pods,
                 "requestDigest": "d"},
    }  # fmt: skip
    await client.create(SANDBOX_CLAIMS, claim, NS)


def _live(pods: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n: p for n, p in pods.items() if not p["metadata"].get("deletionTimestamp")}


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _slot(name: str) -> int:
    slot = pool_slot(NAME, name)
    assert slot is not None and slot[0] == 0, name
    return slot[1]


async def test_filled_to_min_refilled_after_claims_never_past_max(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    await _apply(client, _tenant(POOL))
    async with placing_controller(cluster, "a", pools=FAST_FILL) as a:
        assert a.claims is not None
        book = a.claims.book

        async def ready(n: int) -> dict[str, dict[str, Any]] | None:
            pods = _live(await pool_pods(client, NAME))
            return pods if len(pods) == n and all(map(_ready, pods.values())) else None

        first = await wait_until_async(lambda: ready(3), timeout_s=20)
        assert sorted(map(_slot, first)) == [0, 1, 2]
        registry = a.metrics.registry
        labels = {"namespace": NS, "image": IMAGE, "class": "tiny"}
        assert sample(registry, "sandman_pool_standing_target", **labels) == 3
        # Two claimed: two new slots refill the reserve (3 unclaimed + 2 claimed = max 5).
        taken = sorted(first)[:2]
        await _claim(client, "claim-1", taken)
        await wait_until_async(lambda: all(book.is_claimed(NS, n) for n in taken))
        second = await wait_until_async(lambda: ready(5), timeout_s=20)
        assert sorted(map(_slot, second)) == [0, 1, 2, 3, 4]
        # Two more claimed: at max (5 pods), so no refill; the gauge says 2 short.
        more = sorted(set(second) - set(taken))[:2]
        await _claim(client, "claim-2", more)
        await wait_until_async(lambda: all(book.is_claimed(NS, n) for n in more))
        await wait_until_async(
            lambda: sample(registry, "sandman_pool_standing_short", **labels) == 2, timeout_s=10
        )
        assert len(await pool_pods(client, NAME)) == 5
        creates = writes_by(cluster, POOLS_USER, resource="pods", verb="create")
        assert creates == 5
        # A claimed sandbox released (its pod deleted): one slot refilled, a new number.
        await client.delete(PODS, taken[0], NS)
        third = await wait_until_async(lambda: ready(5), timeout_s=30)
        assert taken[0] not in third and max(map(_slot, third)) == 5
        prep = await client.get(IMAGE_PREPARATIONS, NAME, NS)
        assert prep["status"]["nextSlot"] == 6
        assert "expiresAt" not in prep["spec"] and prep["spec"]["standing"]["min"] == 3


async def test_a_restart_mid_fill_does_not_double_the_pool(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    big = StandingPool(IMAGE, "tiny", min=12, max=12)
    await _apply(client, _tenant(big))
    name = standing_name(big)
    slow = dataclasses.replace(FAST_FILL, qps=4, burst=1, batch=2)
    async with placing_controller(cluster, "a", pools=slow):
        await wait_until_async(lambda: _count(client, name, 3), timeout_s=20)  # a third of the way
    partial = len(await pool_pods(client, name))
    assert 0 < partial < 12
    async with placing_controller(cluster, "b", pools=FAST_FILL):
        await wait_until_async(lambda: _count(client, name, 12), timeout_s=30)
        creates = writes_by(cluster, POOLS_USER, resource="pods", verb="create")
    pods = await pool_pods(client, name)
    assert len(pods) == 12  # twelve pods, no second one for any slot
    assert creates <= 12 + slow.batch  # at most the slots in flight at the restart resent


async def _count(client: KubeClient, name: str, n: int) -> bool:
    return len(await pool_pods(client, name)) >= n


async def test_removed_from_the_configuration_its_unclaimed_pods_go_claimed_ones_stay(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    await _apply(client, _tenant(POOL))
    async with placing_controller(cluster, "a", pools=FAST_FILL) as a:
        assert a.claims is not None
        book = a.claims.book
        await wait_until_async(lambda: _count(client, NAME, 3), timeout_s=20)
        kept = sorted(await pool_pods(client, NAME))[0]
        await _claim(client, "claim-1", [kept])
        await wait_until_async(lambda: book.is_claimed(NS, kept))
        removed = await _apply(client, _tenant())  # the same tenant, its pool gone
        assert removed.counts["deleted"] == 1

        async def only_the_claimed_one_left() -> bool:
            left = await pool_pods(client, NAME)
            return set(left) == {kept} and not left[kept]["metadata"].get("deletionTimestamp")

        await wait_until_async(only_the_claimed_one_left, timeout_s=20)


async def test_the_filler_stops_at_the_tenants_limit(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    """Two cold sandboxes live and a limit of 4: the pool of min 3 gets 2 pods, no more."""
    await _apply(client, _tenant(POOL, limit=4))
    for i in range(2):
        cold = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"cold-{i}", "labels": {LABEL_SANDBOX: f"cold-{i}"}},
            "spec": {"nodeName": "node-0", "containers": [{"name": "sandbox", "image": IMAGE}]},
        }
        await client.create(PODS, cold, NS)
    async with placing_controller(cluster, "a", pools=FAST_FILL) as a:
        labels = {"namespace": NS, "image": IMAGE, "class": "tiny"}
        registry = a.metrics.registry
        await wait_until_async(lambda: _count(client, NAME, 2), timeout_s=20)
        await wait_until_async(
            lambda: sample(registry, "sandman_pool_standing_short", **labels) == 1, timeout_s=10
        )
        assert len(await pool_pods(client, NAME)) == 2
