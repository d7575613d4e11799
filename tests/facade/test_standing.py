"""The facade's writer of standing pools (facade/standing.py) against a real simcluster API
server: every replica renders the same object, two replicas applying at once write one, a
changed pool is replaced under the same name, an unconfigured one is deleted, and a started
facade applies its tenants' pools (none without the pooled source)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from facade.app import FacadeSettings
from facade.podspec import DaemonDelivery, SandboxClass
from facade.service import ServiceSettings
from facade.standing import StandingPools, StandingSettings, standing_name, standing_object
from facade.tenancy import StandingPool, Tenant
from facade.tokens import TokenMinter
from kube import KubeClient
from kube.contract import ANNOTATION_EXPIRES_AT
from kube.pool_contract import LABEL_STANDING
from kube.preparation_contract import IMAGE_PREPARATIONS
from simcluster.embedded import EmbeddedCluster
from tests.support.facade import NAMESPACE, NAMESPACES, live_facade
from tests.support.kube import FAST
from tests.support.pools import install_preparation_crd
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio

POOL = StandingPool("registry.example/base:1", "tiny", 2, 5)
CLASSES = {"tiny": SandboxClass("tiny")}
DELIVERY = DaemonDelivery("host-path")
MINTER = TokenMinter(b"s" * 48)


def _tenant(*pools: StandingPool) -> Tenant:
    return Tenant("t1", NAMESPACE, 50, 10.0, 10, pools=pools)


def _writer(client: KubeClient, tenant: Tenant, *, enabled: bool = True) -> StandingPools:
    return StandingPools(
        client, [tenant], CLASSES, DELIVERY, MINTER, StandingSettings(), enabled=enabled
    )


@pytest.fixture
async def client(cluster: EmbeddedCluster) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as c:
        await c.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
        await install_preparation_crd(c)
        yield c


async def _standing(client: KubeClient) -> list[dict[str, object]]:
    listed = await client.list(
        IMAGE_PREPARATIONS, NAMESPACE, label_selector=f"{LABEL_STANDING}=true"
    )
    return list(listed["items"])


async def test_every_replica_renders_the_same_object() -> None:
    first = standing_object(_tenant(POOL), POOL, CLASSES["tiny"], DELIVERY, MINTER)
    again = standing_object(_tenant(POOL), POOL, CLASSES["tiny"], DELIVERY, MINTER)
    assert first == again and first["metadata"]["name"] == standing_name(POOL)
    template = first["spec"]["podTemplate"]
    assert template["metadata"]["labels"][LABEL_STANDING] == "true"
    assert ANNOTATION_EXPIRES_AT not in template["metadata"].get("annotations", {})
    assert "expiresAt" not in first["spec"]
    assert first["spec"]["standing"] == {"min": 2, "max": 5, "tenantLimit": 50}


async def test_two_replicas_at_once_write_one_object(client: KubeClient) -> None:
    a, b = _writer(client, _tenant(POOL)), _writer(client, _tenant(POOL))
    assert all(await asyncio.gather(a.apply_all(), b.apply_all()))
    assert [o["metadata"]["name"] for o in await _standing(client)] == [standing_name(POOL)]
    assert a.counts["created"] + b.counts["created"] == 1
    assert a.counts["unchanged"] + b.counts["unchanged"] == 1


async def test_a_changed_pool_is_replaced_and_an_unconfigured_one_deleted(
    client: KubeClient,
) -> None:
    other = StandingPool("registry.example/other:1", "tiny", 1, 1)
    assert await _writer(client, _tenant(POOL, other)).apply_all()
    (before,) = [o for o in await _standing(client) if o["metadata"]["name"] == standing_name(POOL)]
    grown = dataclasses.replace(POOL, min=4)
    writer = _writer(client, _tenant(grown))
    assert await writer.apply_all()
    assert writer.counts == {"created": 0, "replaced": 1, "unchanged": 0, "deleted": 1}
    (after,) = await _standing(client)
    assert after["metadata"]["name"] == standing_name(POOL)  # the same object, its spec new
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"]["standing"]["min"] == 4
    again = _writer(client, _tenant(grown))
    assert await again.apply_all() and again.counts["unchanged"] == 1  # nothing rewritten


async def test_without_the_pooled_source_no_standing_object_is_kept(client: KubeClient) -> None:
    assert await _writer(client, _tenant(POOL)).apply_all()
    off = _writer(client, _tenant(POOL), enabled=False)
    assert await off.apply_all() and off.counts["deleted"] == 1
    assert await _standing(client) == []


async def test_a_started_facade_applies_its_tenants_pools(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    async with await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as client:
        await install_preparation_crd(client)
        entry = {"image": POOL.image, "class": "tiny", "min": 2, "max": 5}
        settings = FacadeSettings(port=0, client=FAST)
        async with live_facade(cluster.kubeconfig, settings, tmp_path, pools=[entry]) as live:
            assert live.facade.standing is not None
            await wait_until_async(live.facade.standing.applied.is_set, timeout_s=10)
            (obj,) = await _standing(client)
            assert obj["metadata"]["name"] == standing_name(POOL)
        # Restarted without the pooled source: the pool's object goes.
        cold = FacadeSettings(port=0, client=FAST, service=ServiceSettings(pooled=None))
        async with live_facade(cluster.kubeconfig, cold, tmp_path, pools=[entry]) as live:
            assert live.facade.standing is not None
            await wait_until_async(live.facade.standing.applied.is_set, timeout_s=10)
            assert await _standing(client) == []
