"""Pre-placed creation against simcluster with real controllers (the process's own
``Controller``, leader election, its HTTP server) and the facade's placement client: one
write per sandbox, never more than fits, the fallback, and a leader change that does not
plan on its predecessor's placements."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import pytest

from kube import PODS, KubeClient
from kube.placement import PLACEMENT_PATH, Placement, PlacementClient
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import CONTROLLER_USER, cluster_of, writes_by
from tests.support.placement import LEASE, PLACEMENT, placing_controller, rejected, serving
from tests.support.pods import pod
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


@pytest.fixture
def cluster_settings() -> ClusterSettings:
    return cluster_of(2, cpu="4", foreign=0.0)


async def create_placed(client: KubeClient, placed: dict[str, Placement], names: list[str]) -> None:
    """Create as the facade does: on the node while the placement is good, else unbound."""
    for name in names:
        body = pod(name, app="sandbox")
        if name in placed and time.monotonic() <= placed[name].send_by:
            body["spec"]["nodeName"] = placed[name].node
        await client.create(PODS, body, "default")


async def test_placed_pods_take_one_write_and_never_more_than_fits(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    async with placing_controller(cluster, "a") as a:
        await wait_until_async(lambda: serving(a), timeout_s=10)
        placer = PlacementClient(client, LEASE)
        try:
            names = [f"sb-{i}" for i in range(40)]  # 2 nodes x 4 CPU hold fewer of 250m
            placed = await placer.place("default", names, pod("template", app="sandbox"))
            assert 16 <= len(placed) < 40
            assert {p.node for p in placed.values()} == {"node-0", "node-1"}
            # Asked again (a create that missed its placement's life): the same nodes, and
            # the capacity is not taken twice.
            reserved = a.view.scheduler.stats()["reserved"] if a.view is not None else -1
            again = await placer.place("default", names, pod("template", app="sandbox"))
            assert {n: p.node for n, p in again.items()} == {n: p.node for n, p in placed.items()}
            assert a.view is not None and a.view.scheduler.stats()["reserved"] == reserved
            await create_placed(client, placed, names)
            # The leader's watch shows the placed pods: their reservations are released.
            assert a.view is not None
            await wait_until_async(lambda: a.view.scheduler.stats()["reserved"] == 0)
            more = await placer.place("default", ["sb-x"], pod("template", app="sandbox"))
            assert more == {}  # full: the placed pods count, reservation or pod
        finally:
            await placer.close()
        bound = await client.list(PODS, "default", label_selector="app=sandbox")
        on_nodes = [p for p in bound["items"] if p["spec"].get("nodeName")]
        assert len(on_nodes) == len(placed)  # the rest stays unbound: nothing more fits
        assert writes_by(cluster, CONTROLLER_USER, resource="pods", subresource="binding") == 0
        assert rejected(bound["items"]) == 0


async def test_no_leader_or_bad_input_means_unbound_never_an_error(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    placer = PlacementClient(client, LEASE)
    try:
        assert await placer.place("default", ["sb-0"], pod("t")) == {}  # no Lease at all
        async with placing_controller(cluster, "a") as a:
            await wait_until_async(lambda: serving(a), timeout_s=10)
            auth = client.bearer_headers()  # the admin's, whom the test controllers admit
            async with aiohttp.ClientSession(a.health_url, headers=auth) as http:
                bad: list[Any] = [b"{", {"namespace": "default", "names": [], "template": {}}]
                bad.append({"namespace": "default", "names": ["a"], "template": {"spec": 1}})
                for body in bad:
                    data = body if isinstance(body, bytes) else None
                    async with http.post(
                        PLACEMENT_PATH, data=data, json=None if data else body
                    ) as resp:
                        assert resp.status == 400
                        assert (await resp.json())["reason"].startswith("invalid_")
    finally:
        await placer.close()


async def test_a_new_leader_waits_out_its_predecessors_placements(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    placer = PlacementClient(client, LEASE)
    try:
        async with placing_controller(cluster, "b") as b, placing_controller(cluster, "a") as a:
            await wait_until_async(lambda: serving(a) or serving(b), timeout_s=10)
            first, second = (a, b) if serving(a) else (b, a)
            names = [f"sb-{i}" for i in range(40)]
            placed = await placer.place("default", names, pod("template", app="sandbox"))
            assert placed
            first.stop()  # a graceful handover: the standby takes over within 0.2 s
            assert second.elector is not None
            await wait_until_async(second.elector.is_leader)
            taken_over = time.monotonic()
            # The new leader refuses while the old leader's placements may still land.
            url = second.health_url
            async with aiohttp.ClientSession(url, headers=client.bearer_headers()) as http:
                body = {"namespace": "default", "names": ["sb-y"], "template": pod("t")}
                async with http.post(PLACEMENT_PATH, json=body) as resp:
                    assert resp.status == 503
                    assert (await resp.json())["reason"] == "not_serving"
            await create_placed(client, placed, names)  # within the placements' life
            await wait_until_async(lambda: serving(second), timeout_s=10)
            assert time.monotonic() - taken_over >= PLACEMENT.handover_s - 0.1
            more = await placer.place("default", ["sb-z"], pod("template", app="sandbox"))
            assert more == {}  # the old leader's pods fill the nodes
        pods = (await client.list(PODS, "default", label_selector="app=sandbox"))["items"]
        assert sum(1 for p in pods if p["spec"].get("nodeName")) == len(placed)
        assert rejected(pods) == 0
    finally:
        await placer.close()
