"""The pool filler (controller/pools.py) against simcluster with real controllers (the
process's own ``Controller``: leader election, placements, claims): announced sandboxes
created pre-placed (one API write each), a restart mid-fill that does not double the pool,
an announcement's end that deletes its unclaimed pods (a claimed one stays), and unhealthy
pool pods replaced under their slot's name."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controller.pools import PoolSettings
from kube import NODES, PODS, KubeClient
from kube.pool_contract import LABEL_POOL, SANDBOX_CLAIMS, pool_pod_name
from kube.preparation_contract import IMAGE_PREPARATIONS
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import CONTROLLER_USER, cluster_of, writes_by
from tests.support.metrics import sample
from tests.support.placement import placing_controller
from tests.support.pools import ANN, NS, announce, pool_pods, wanted
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(150)]

IMAGES = (("registry.local/a:1", 3), ("registry.local/b:1", 2))
FAST_FILL = PoolSettings(qps=100, burst=20, interval_s=0.1, status_interval_s=0.2)


@pytest.fixture
def cluster_settings() -> ClusterSettings:
    return cluster_of(2, cpu="8", foreign=0.0)


#: Who the filler writes pool pods as (PoolSettings.identity: its own APF level).
POOLS_USER = PoolSettings().identity


def _pod_creates(cluster: EmbeddedCluster) -> float:
    return writes_by(cluster, POOLS_USER, resource="pods", verb="create")


async def test_an_announced_pool_is_filled_pre_placed_and_its_counts_reported(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    await announce(client, IMAGES)
    async with placing_controller(cluster, "a", pools=FAST_FILL) as a:

        async def filled() -> bool:
            pods = await pool_pods(client)
            return set(pods) == wanted(IMAGES) and all(
                p["spec"].get("nodeName") for p in pods.values()
            )

        await wait_until_async(filled, timeout_s=20)
        pods = await pool_pods(client)
        images = {p["spec"]["containers"][0]["image"] for p in pods.values()}
        assert images == {i for i, _ in IMAGES}
        assert _pod_creates(cluster) == len(wanted(IMAGES))  # one write per pod: no binds
        # ...all sent as the pools identity, none as the controller itself.
        assert writes_by(cluster, CONTROLLER_USER, resource="pods", verb="create") == 0
        assert writes_by(cluster, CONTROLLER_USER, resource="pods", subresource="binding") == 0

        async def reported() -> Any:
            obj = await client.get(IMAGE_PREPARATIONS, ANN, NS)
            pool = (obj.get("status") or {}).get("pool")
            return pool if pool and pool["ready"] == 5 else None

        pool = await wait_until_async(reported, timeout_s=20)
        assert pool == {"wanted": 5, "created": 5, "ready": 5, "claimed": 0}
        registry = a.metrics.registry
        assert sample(registry, "sandman_pool_creates_total", outcome="created") == 5
        assert sample(registry, "sandman_pool_fill_seconds_count") == 1
        await wait_until_async(lambda: sample(registry, "sandman_pool_pods", state="ready") == 5)


async def test_a_restart_mid_fill_does_not_double_the_pool(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    images = (("registry.local/a:1", 12),)
    await announce(client, images)
    slow = dataclasses.replace(FAST_FILL, qps=4, burst=1, batch=2)
    async with placing_controller(cluster, "a", pools=slow) as a:
        await wait_until_async(lambda: _some(client, 3), timeout_s=20)
        a.stop()
    partial = len(await pool_pods(client))
    assert 0 < partial < 12
    async with placing_controller(cluster, "b", pools=FAST_FILL):

        async def filled() -> bool:
            return set(await pool_pods(client)) == wanted(images)

        await wait_until_async(filled, timeout_s=30)
    assert set(await pool_pods(client)) == wanted(images)  # twelve pods, one per slot
    # At most the slots in flight at the restart were sent twice (AlreadyExists: success).
    assert _pod_creates(cluster) <= 12 + slow.batch


async def _some(client: KubeClient, n: int) -> bool:
    return len(await pool_pods(client)) >= n


async def test_the_end_of_an_announcement_deletes_its_unclaimed_pods_only(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    await announce(client, IMAGES)
    async with placing_controller(cluster, "a", pools=FAST_FILL) as a:

        async def filled() -> bool:
            return set(await pool_pods(client)) == wanted(IMAGES)

        await wait_until_async(filled, timeout_s=20)
        kept = pool_pod_name(ANN, 0, 0)
        claim = {
            "apiVersion": SANDBOX_CLAIMS.api_version,
            "kind": SANDBOX_CLAIMS.kind,
            "metadata": {"name": "claim-1", "labels": {LABEL_POOL: ANN}},
            "spec": {"pool": ANN, "image": IMAGES[0][0], "class": "tiny", "pods": [kept],
                     "requestDigest": "d"},
        }  # fmt: skip
        await client.create(SANDBOX_CLAIMS, claim, NS)
        assert a.claims is not None
        await wait_until_async(lambda: a.claims is not None and a.claims.book.is_claimed(NS, kept))
        await client.delete(IMAGE_PREPARATIONS, ANN, NS)

        async def only_the_claimed_one_left() -> bool:
            left = await pool_pods(client)
            return set(left) == {kept} and not left[kept]["metadata"].get("deletionTimestamp")

        await wait_until_async(only_the_claimed_one_left, timeout_s=20)


async def test_a_failed_pod_and_one_on_a_cordoned_node_are_replaced_while_unclaimed(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    await announce(client, IMAGES)
    async with placing_controller(cluster, "a", pools=FAST_FILL):

        async def filled() -> dict[str, dict[str, Any]] | None:
            # Ready, not only created: the kubelet's last status write for a started pod is
            # its Ready condition, and one landing after the patch below put the pod back to
            # Running (1 run in 5 on a loaded machine), so the filler never saw it fail.
            pods = await pool_pods(client)
            every = set(pods) == wanted(IMAGES) and all(map(_ready, pods.values()))
            return pods if every else None

        pods = await wait_until_async(filled, timeout_s=20)
        failed = pool_pod_name(ANN, 1, 0)
        uid = pods[failed]["metadata"]["uid"]
        await client.request(
            "PATCH",
            PODS.path(NS, failed, "status"),
            body={"status": {"phase": "Failed", "reason": "Evicted"}},
            content_type="application/merge-patch+json",
        )

        async def replaced() -> bool:
            now = await pool_pods(client)
            return failed in now and now[failed]["metadata"]["uid"] != uid

        # (the old pod's graceful deletion first: slow on a loaded machine, hence the bound)
        await wait_until_async(replaced, timeout_s=45)
        # Cordon a node: its pool pods go and come back on the other one.
        victim = next(iter(pods.values()))["spec"]["nodeName"]
        await client.patch(NODES, victim, {"spec": {"unschedulable": True}})

        async def moved() -> bool:
            now = await pool_pods(client)
            return set(now) == wanted(IMAGES) and all(
                p["spec"]["nodeName"] != victim and not p["metadata"].get("deletionTimestamp")
                for p in now.values()
            )

        await wait_until_async(moved, timeout_s=45)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
