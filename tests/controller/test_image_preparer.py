"""Preparation decisions end to end: the real controller (in-process, its real client)
against an embedded cluster with the ImagePreparation CRD; the test plays the node agents by
writing their Leases exactly as agents do (the agent itself is tested in tests/node).

Checked: enough nodes for the count under the start-queue cap, spread over the nodes; the
cluster-wide bound on nodes pulling one image; progress in the request's status; release
when the request goes; invalid and expired requests; image locality in placement from the
agents' data; only the leader writes."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from controller.app import Controller, ControllerSettings
from controller.image_preparer import PreparerSettings
from controller.leader import ElectionSettings
from devstack.crds import image_preparation_crd
from kube import LEASES, PODS, KubeClient
from kube.errors import AlreadyExists
from kube.preparation_contract import (
    AGENT_LEASE_NAMESPACE,
    ANNOTATION_PREPARE,
    ANNOTATION_READY,
    IMAGE_PREPARATIONS,
    LABEL_NODE_AGENT,
    decode_images,
    lease_name,
)
from kube.resources import Resource
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import cluster_of
from tests.support.pods import pod
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
NS = "sandman-system"  # the election Lease's
AGENT_NS = AGENT_LEASE_NAMESPACE  # the agents' Leases'
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)
NODES = [f"node-{i}" for i in range(6)]
OTHER_TENANT = "sandman-b"


@pytest.fixture
def cluster_settings() -> ClusterSettings:
    return dataclasses.replace(
        cluster_of(len(NODES), foreign=0.0), namespaces=(AGENT_NS, OTHER_TENANT)
    )


def _micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def agent_lease(client: KubeClient, node: str, ready: list[str] = ()) -> None:  # type: ignore[assignment]
    """What a node agent writes: create its Lease, then renew it with its ready set."""
    body = {
        "metadata": {
            "name": lease_name(node),
            "namespace": AGENT_NS,
            "labels": {LABEL_NODE_AGENT: "true"},
            "annotations": {ANNOTATION_READY: json.dumps(sorted(ready))},
        },
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 60, "renewTime": _micro()},
    }
    try:
        await client.create(LEASES, body, AGENT_NS)
    except AlreadyExists:
        patch = {"metadata": body["metadata"], "spec": {"renewTime": _micro()}}
        await client.patch(LEASES, lease_name(node), patch, AGENT_NS)


async def plans(client: KubeClient) -> dict[str, frozenset[str]]:
    selector = f"{LABEL_NODE_AGENT}=true"
    leases = (await client.list(LEASES, AGENT_NS, label_selector=selector))["items"]
    return {
        lease["spec"]["holderIdentity"]: decode_images(
            (lease["metadata"].get("annotations") or {}).get(ANNOTATION_PREPARE)
        )
        for lease in leases
    }


def holders(plan: dict[str, frozenset[str]], image: str) -> list[str]:
    return sorted(n for n, images in plan.items() if image in images)


async def request(client: KubeClient, name: str, spec: dict[str, Any], ns: str = "default") -> None:
    body = {"apiVersion": "sandman.io/v1alpha1", "kind": "ImagePreparation",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip
    await client.create(IMAGE_PREPARATIONS, body, ns)


async def status(client: KubeClient, name: str, ns: str = "default") -> dict[str, Any]:
    return (await client.get(IMAGE_PREPARATIONS, name, ns)).get("status") or {}


# No spread (rule 7) unless a test asks for it: the minimum plan is what most tests check.
FAST_PREP = PreparerSettings(decide_interval_s=0.1, resync_s=1.0, node_write_interval_s=0.1,
                             status_interval_s=0.1, spread_images_per_node=0)  # fmt: skip


@contextlib.asynccontextmanager
async def running(
    cluster: EmbeddedCluster, prepare: PreparerSettings = FAST_PREP, identity: str | None = None
) -> AsyncIterator[Controller]:
    assert cluster.cluster is not None
    election = None
    if identity is not None:
        # No test here changes leaders: a lease a loaded machine cannot lose mid-test.
        election = ElectionSettings(namespace=NS, identity=identity, lease_duration_s=10.0,
                                    renew_deadline_s=8.0, retry_period_s=0.2)  # fmt: skip
    settings = ControllerSettings(
        kubeconfig=str(cluster.cluster.kubeconfigs["controller"]),
        prepare=prepare,
        election=election,
        health_port=0,
        freeze_after_sync=False,
    )
    controller = Controller(settings)
    task = asyncio.create_task(controller.run())
    try:
        await wait_until_async(lambda: controller.ready() or task.done(), timeout_s=20)
        yield controller
    finally:
        controller.stop()
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(10):
                await task


@pytest.fixture
async def agents(client: KubeClient) -> list[str]:
    with contextlib.suppress(AlreadyExists):
        await client.create(CRDS, image_preparation_crd())
    for node in NODES:
        await agent_lease(client, node)
    return NODES


async def test_enough_nodes_for_the_count_spread_with_progress(
    cluster: EmbeddedCluster, client: KubeClient, agents: list[str]
) -> None:
    a, b = "registry.local/task-a:1", "registry.local/task-b:1"
    async with running(cluster):
        await request(client, "step", {"images": [{"image": a, "count": 12},
                                                   {"image": b, "count": 3}]})  # fmt: skip

        async def planned() -> dict[str, frozenset[str]] | None:
            p = await plans(client)
            return p if len(holders(p, a)) == 3 and len(holders(p, b)) == 1 else None

        plan = await wait_until_async(planned, timeout_s=10)  # ceil(12/5) = 3, ceil(3/5) = 1
        assert not set(holders(plan, a)) & set(holders(plan, b))  # spread: no hot spot
        got = await wait_until_async(lambda: _phase(client, "step", "Preparing"))
        assert [i["nodesWanted"] for i in got["images"]] == [3, 1]
        for node, images in plan.items():  # the agents pull and publish
            await agent_lease(client, node, sorted(images))
        got = await wait_until_async(lambda: _phase(client, "step", "Ready"), timeout_s=10)
        assert [(i["nodesReady"], i["sandboxesReady"]) for i in got["images"]] == [(3, 12), (1, 3)]
        assert got["readyAt"]


async def test_a_tenant_status_counts_only_what_the_tenant_announced(
    cluster: EmbeddedCluster, client: KubeClient, agents: list[str]
) -> None:
    """The plan serves both tenants' demand for one image (12 + 3 sandboxes: 3 nodes), but
    the small tenant's status reads as if it were alone (1 node wanted, at most 1 ready):
    it does not learn how much of the image the other tenant announced."""
    image = "registry.local/shared:1"
    async with running(cluster):
        await request(client, "big", {"images": [{"image": image, "count": 12}]})
        await request(client, "small", {"images": [{"image": image, "count": 3}]}, OTHER_TENANT)
        plan = await wait_until_async(
            lambda: _planned_on(client, image, 3), timeout_s=10
        )  # ceil(15/5) = 3 nodes for the two together
        for node, images in plan.items():
            await agent_lease(client, node, sorted(images))
        big = await wait_until_async(lambda: _phase(client, "big", "Ready"), timeout_s=10)
        small = await wait_until_async(
            lambda: _phase(client, "small", "Ready", OTHER_TENANT), timeout_s=10
        )
        assert [(i["nodesWanted"], i["nodesReady"]) for i in big["images"]] == [(3, 3)]
        assert [
            (i["nodesWanted"], i["nodesPlanned"], i["nodesReady"], i["sandboxesReady"])
            for i in small["images"]
        ] == [(1, 1, 1, 3)]


async def _planned_on(client: KubeClient, image: str, n: int) -> dict[str, frozenset[str]] | None:
    p = await plans(client)
    return p if len(holders(p, image)) == n else None


async def test_with_room_an_image_is_spread_over_a_node_per_sandbox(
    cluster: EmbeddedCluster, client: KubeClient, agents: list[str]
) -> None:
    """Rule 7: 6 nodes with room, an image for 4 sandboxes goes to 4 nodes (the minimum is
    1); progress still counts the minimum, so "ready enough" does not wait for the spread."""
    image = "registry.local/task-s:1"
    async with running(cluster, replace(FAST_PREP, spread_images_per_node=16)):
        await request(client, "wide", {"images": [{"image": image, "count": 4}]})
        plan = await wait_until_async(lambda: _planned_more(client, image, 4), timeout_s=10)
        assert len(holders(plan, image)) == 4
        got = await wait_until_async(lambda: _phase(client, "wide", "Preparing"))
        assert [(i["nodesWanted"], i["nodesPlanned"]) for i in got["images"]] == [(1, 4)]


async def _phase(
    client: KubeClient, name: str, phase: str, ns: str = "default"
) -> dict[str, Any] | None:
    got = await status(client, name, ns)
    return got if got.get("phase") == phase else None


async def test_nodes_pulling_one_image_are_bounded_cluster_wide(
    cluster: EmbeddedCluster, client: KubeClient, agents: list[str]
) -> None:
    image = "registry.local/popular:1"
    prepare = PreparerSettings(decide_interval_s=0.1, resync_s=1.0, node_write_interval_s=0.1,
                               status_interval_s=0.1, max_pulls_per_image=2)  # fmt: skip
    async with running(cluster, prepare):
        await request(client, "big", {"images": [{"image": image, "count": 30}]})  # 6 nodes
        seen: list[int] = []
        for _round in range(3):
            plan = await wait_until_async(
                lambda: _planned_more(client, image, len(seen) * 2 + 2), timeout_s=10
            )
            pulling = holders(plan, image)
            seen.append(len(pulling))
            assert len(pulling) == len(seen) * 2  # two new nodes at a time, never more
            for node in pulling:
                await agent_lease(client, node, [image])
        assert seen == [2, 4, 6]


async def _planned_more(client: KubeClient, image: str, n: int) -> dict[str, frozenset[str]] | None:
    plan = await plans(client)
    return plan if len(holders(plan, image)) >= n else None


async def test_images_are_released_when_no_longer_requested(
    cluster: EmbeddedCluster, client: KubeClient, agents: list[str]
) -> None:
    image = "registry.local/step-1:1"
    async with running(cluster):
        await request(client, "once", {"images": [{"image": image, "count": 5}]})
        await wait_until_async(lambda: _planned_more(client, image, 1))
        await client.delete(IMAGE_PREPARATIONS, "once", "default")

        async def released() -> bool:
            return not any((await plans(client)).values())

        await wait_until_async(released, timeout_s=10)


async def test_bad_and_expired_requests_get_a_phase_and_no_pulls(
    cluster: EmbeddedCluster, client: KubeClient, agents: list[str]
) -> None:
    async with running(cluster):
        # The CRD's schema admits it (the API server refuses what it does not: simcluster
        # holds custom resources to their schema); the wire model does not.
        await request(client, "bad", {"images": [{"image": "x:1", "count": 100_001}]})
        past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).isoformat()
        await request(client, "old", {"images": [{"image": "y:1"}], "expiresAt": past})
        bad = await wait_until_async(lambda: _phase(client, "bad", "Invalid"))
        assert bad["reason"] == "InvalidSpec" and "$.images[0].count" in bad["message"]
        await wait_until_async(lambda: _phase(client, "old", "Expired"))
        assert not any((await plans(client)).values())


async def test_placement_uses_the_images_the_agents_report(
    cluster: EmbeddedCluster, client: KubeClient, agents: list[str]
) -> None:
    """node.status.images does not list the image (the kubelet lists only the 50 largest);
    the agent's Lease does, and the pod lands there."""
    image = "registry.local/small-task:1"
    await agent_lease(client, "node-4", [image])
    async with running(cluster):
        sandbox = pod("sb-local", app="sandbox")
        sandbox["spec"]["containers"][0]["image"] = image
        await client.create(PODS, sandbox, "default")

        async def node() -> str | None:
            got = await client.get(PODS, "sb-local", "default")
            return got["spec"].get("nodeName")

        assert await wait_until_async(node, timeout_s=10) == "node-4"


async def test_only_the_leader_writes_plans_and_statuses(
    cluster: EmbeddedCluster, client: KubeClient, agents: list[str]
) -> None:
    image = "registry.local/led:1"
    async with (
        running(cluster, identity="one") as first,
        running(cluster, identity="two") as second,
    ):
        await request(client, "led", {"images": [{"image": image, "count": 5}]})
        await wait_until_async(lambda: _planned_more(client, image, 1))
        await wait_until_async(lambda: _phase(client, "led", "Preparing"))
        writes = {
            c.settings.election.identity: _writes(c)  # type: ignore[union-attr]
            for c in (first, second)
        }
        leader = [c for c in (first, second) if c.preparer and c.preparer.leading]
        assert len(leader) == 1
        lead_id = leader[0].settings.election.identity  # type: ignore[union-attr]
        assert writes[lead_id] >= 2  # a plan and a status
        assert sum(writes.values()) == writes[lead_id]  # the standby wrote nothing


def _writes(controller: Controller) -> float:
    assert controller.preparer is not None
    total = 0.0
    for family in controller.preparer.metrics.writes.collect():
        total += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return total
