"""Garbage collection on simcluster: terminal sandboxes after their retention, expired ones,
ones stuck Pending, and ones on a deleted node; each with a metric reason and an Event, and
nobody else's pods touched."""

from __future__ import annotations

import datetime as dt

import anyio
import pytest
from conftest import eventually, inject, pod
from harness import controller, create_sandboxes
from test_binder import bound, cluster_of, sandboxes

from controller.gc import GCSettings
from controller.kube import EVENTS, NODES, PODS, KubeClient
from simcluster.embedded import EmbeddedCluster

pytestmark = pytest.mark.anyio

FAST_GC = GCSettings(
    interval_s=0.1, terminal_retention_s=0.5, pending_deadline_s=2.0, node_gone_grace_s=0.3
)


def deleted(ctl: object, reason: str) -> float:
    return ctl.metrics.gc_deletions.labels(reason)._value.get()  # type: ignore[attr-defined,no-any-return]


async def names(client: KubeClient) -> set[str]:
    return {p["metadata"]["name"] for p in await sandboxes(client)}


@pytest.mark.parametrize("cluster_settings", [cluster_of(2)])
async def test_terminal_sandbox_deleted_after_retention(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    async with controller(cluster, gc=FAST_GC) as ctl:
        await create_sandboxes(client, 3)
        other = pod("not-ours", scheduler="default-scheduler")
        other["spec"]["nodeName"] = "node-0"
        await client.create(PODS, other, "default")
        await eventually(lambda: ctl.metrics.binds.labels("bound")._value.get() == 3)
        await eventually(lambda: len(ctl.view.bound.cache) >= 3 + 2 + 1)
        for p in ("sb-0", "not-ours"):
            await eventually_running(client, p)
            await inject(client, kind="evict", namespace="default", name=p)
        await eventually(lambda: deleted(ctl, "terminal") == 1, within=5)
        assert await names(client) == {"sb-1", "sb-2"}
        failed = await client.get(PODS, "not-ours", "default")  # not a sandbox: kept
        assert failed["status"]["phase"] == "Failed"
        events = (await client.list(EVENTS, "default"))["items"]
        assert [(e["involvedObject"]["name"], e["reason"]) for e in events] == [
            ("sb-0", "SandboxDeleted")
        ]
        assert events[0]["message"].endswith(": terminal")


async def eventually_running(client: KubeClient, name: str) -> None:
    for _ in range(200):
        p = await client.get(PODS, name, "default")
        if p["status"].get("phase") == "Running":
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"{name} never ran")


@pytest.mark.parametrize("cluster_settings", [cluster_of(1, cpu="1", foreign=0.0)])
async def test_expired_and_stuck_pending_sandboxes_deleted(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    async with controller(cluster, gc=FAST_GC) as ctl:
        past = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        expired = pod("expired", app="sandbox")
        expired["metadata"]["annotations"] = {FAST_GC.expires_annotation: past}
        await client.create(PODS, expired, "default")
        await create_sandboxes(client, 6)  # 4 fit on the 1-CPU node, 2 stay Pending
        await eventually(lambda: deleted(ctl, "expired") == 1)
        await eventually(lambda: ctl.metrics.binds.labels("bound")._value.get() >= 4)
        await eventually(lambda: deleted(ctl, "pending-timeout") == 2, within=6)
        remaining = await sandboxes(client)
        assert len(remaining) == bound(remaining) == 4
        assert "expired" not in await names(client)


@pytest.mark.parametrize("cluster_settings", [cluster_of(2, foreign=0.0)])
async def test_sandboxes_on_a_deleted_node_are_removed(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    async with controller(cluster, gc=FAST_GC) as ctl:
        await create_sandboxes(client, 30)
        await eventually(lambda: ctl.metrics.binds.labels("bound")._value.get() == 30)
        pods = await sandboxes(client)
        on_node0 = {p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == "node-0"}
        assert on_node0
        await client.delete(NODES, "node-0")
        await eventually(lambda: deleted(ctl, "node-gone") == len(on_node0), within=5)
        left = await sandboxes(client)
        assert not on_node0 & {p["metadata"]["name"] for p in left}
        assert all(p["spec"]["nodeName"] == "node-1" for p in left)
        assert "node-0" not in ctl.view.scheduler.model.nodes
