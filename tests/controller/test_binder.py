"""The bulk binder on simcluster (virtual runtime): a burst of sandboxes all bound with one
write each and no kubelet rejections; unschedulable pods reported once and placed when
capacity appears; injected 429/500 and dropped watches cost retries, never a duplicate."""

from __future__ import annotations

import anyio
import pytest

from controller.binder import BinderSettings
from kube import EVENTS, PODS, KubeClient
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import (
    CONTROLLER_USER,
    bound,
    cluster_of,
    controller,
    create_sandboxes,
    sandboxes,
    server_requests,
    writes_by,
)
from tests.support.kube import inject
from tests.support.metrics import sample
from tests.support.pods import pod
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("cluster_settings", [cluster_of(10)])
async def test_burst_binds_everything_with_one_write_each(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    n = 300
    async with controller(cluster) as ctl:
        await create_sandboxes(client, n)
        await wait_until_async(lambda: bound_now(ctl) == n, timeout_s=30)
        pods = await sandboxes(client)
        assert bound(pods) == n
        await wait_until_async(lambda: ctl.binder.counts()["pending"] == 0)
    running = await sandboxes(client)
    assert not [p for p in running if p["status"].get("phase") == "Failed"]  # no rejections
    assert writes_by(cluster, CONTROLLER_USER) == n
    assert writes_by(cluster, CONTROLLER_USER, subresource="binding", code=201) == n
    # capacity was respected: per node, our sandboxes fit the 70% left by other tenants
    per_node: dict[str, int] = {}
    for p in pods:
        per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
    assert max(per_node.values()) <= int(16 * 0.7 / 0.25)


@pytest.mark.slow
@pytest.mark.parametrize("cluster_settings", [cluster_of(50)])
async def test_issue_burst_2000_sandboxes_over_50_nodes(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    """The issue's burst: 2,000 sandboxes over 50 nodes, 30% held by other tenants."""
    n = 2000
    async with controller(cluster) as ctl:
        await create_sandboxes(client, n)
        await wait_until_async(lambda: bound_now(ctl) == n, timeout_s=40)
    pods = await sandboxes(client)
    assert bound(pods) == n
    assert not [p for p in pods if p["status"].get("phase") == "Failed"]
    assert writes_by(cluster, CONTROLLER_USER) == n
    assert writes_by(cluster, CONTROLLER_USER, subresource="binding", code=201) == n


@pytest.mark.parametrize("cluster_settings", [cluster_of(3, cpu="1", foreign=0.0)])
async def test_unschedulable_reported_once_and_placed_when_capacity_appears(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    settings = BinderSettings(retry_unschedulable_s=0.1)
    async with controller(cluster, settings) as ctl:
        await create_sandboxes(client, 15)  # 3 nodes x 4 x 250m = 12 fit
        await wait_until_async(lambda: bound_now(ctl) == 12)
        await wait_until_async(lambda: ctl.binder.counts()["parked"] == 3)
        await wait_until_async(
            lambda: (
                sample(
                    ctl.metrics.registry, "sandman_events_recorded_total", reason="FailedScheduling"
                )
                == 3
            )
        )
        events = (await client.list(EVENTS, "default"))["items"]
        assert len(events) == 3
        assert {e["reason"] for e in events} == {"FailedScheduling"}
        assert events[0]["message"] == "0/3 nodes are available: 3 Insufficient cpu."
        plans = sample(ctl.metrics.registry, "sandman_plan_batch_pods_sum")
        # Another tenant's pod comes and goes on a full node (the kubelet rejects it, then it
        # is deleted): each change may have freed room, so parked pods are re-planned -
        # once per change at most, then they wait again: never hot-looped.
        other = pod("other", scheduler="default-scheduler")
        other["spec"]["nodeName"] = "node-0"
        await client.create(PODS, other, "default")
        await client.delete(PODS, "other", "default", grace_period_s=0)
        await wait_until_async(
            lambda: sample(ctl.metrics.registry, "sandman_plan_batch_pods_sum") > plans
        )
        # The passing of time is what is tested here: over 5 retry periods (0.5 s) a hot
        # loop would re-plan the parked pods again and again; there is no event to wait for.
        await anyio.sleep(0.5)
        assert sample(ctl.metrics.registry, "sandman_plan_batch_pods_sum") <= plans + 3 * 2
        assert ctl.binder.counts()["parked"] == 3
        assert (
            sample(ctl.metrics.registry, "sandman_events_recorded_total", reason="FailedScheduling")
            == 3
        )
        assert cluster.cluster is not None
        cluster.call(lambda: cluster.cluster.add_nodes(1))  # type: ignore[union-attr]
        await wait_until_async(lambda: bound_now(ctl) == 15)
        assert bound(await sandboxes(client)) == 15
        assert ctl.binder.counts()["parked"] == 0


@pytest.mark.parametrize("cluster_settings", [cluster_of(10)])
async def test_injected_errors_and_dropped_watches_cost_no_duplicates(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    n = 200
    async with controller(cluster) as ctl:
        await inject(client, kind="api-errors", verb="create", rate=0.05, code=500)
        await inject(client, kind="api-errors", verb="watch", rate=0.3, code=500)
        await create_sandboxes(client, n // 2)
        await wait_until_async(lambda: bound_now(ctl) >= n // 4, timeout_s=20)
        await inject(client, kind="drop-watches")
        await inject(client, kind="api-errors", verb="create", rate=0.05, code=429)
        await create_sandboxes(client, n // 2, start=n // 2)
        await wait_until_async(lambda: bound_now(ctl) == n, timeout_s=40)
        await inject(client, kind="clear")
        assert bound(await sandboxes(client)) == n
    seen = {
        (labels["verb"], labels["code"]): v
        for labels, v in server_requests(cluster)
        if labels["user"] == CONTROLLER_USER
    }
    assert seen.get(("create", "500"), 0) > 0  # the faults did hit the controller's binds
    assert seen.get(("create", "429"), 0) > 0
    assert sample(ctl.metrics.registry, "sandman_api_throttled_total") == seen[("create", "429")]
    # every pod bound by exactly one successful binding request
    assert writes_by(cluster, CONTROLLER_USER, subresource="binding", code=201) == n
    assert writes_by(cluster, CONTROLLER_USER, subresource="binding", code=409) == 0


def bound_now(ctl: object) -> float:
    return sample(ctl.metrics.registry, "sandman_binds_total", outcome="bound")  # type: ignore[attr-defined]
