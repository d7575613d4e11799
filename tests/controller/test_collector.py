"""Garbage collection on simcluster: terminal sandboxes after their retention, expired ones,
ones stuck Pending, and ones on a deleted node; each with a metric reason and an Event, and
nobody else's pods touched."""

from __future__ import annotations

import contextlib
import datetime as dt

import pytest

from controller.collector import GCSettings
from devstack.crds import image_preparation_crd
from kube import EVENTS, LEASES, NODES, PODS, KubeClient
from kube.errors import AlreadyExists
from kube.preparation_contract import IMAGE_PREPARATIONS
from kube.resources import Resource
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import bound, cluster_of, controller, create_sandboxes, sandboxes
from tests.support.kube import inject
from tests.support.metrics import sample
from tests.support.pods import pod
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)
FAST_GC = GCSettings(
    interval_s=0.1, terminal_retention_s=0.5, pending_deadline_s=2.0, node_gone_grace_s=0.3
)


def bound_count(ctl: object) -> float:
    return sample(ctl.metrics.registry, "sandman_binds_total", outcome="bound")  # type: ignore[attr-defined]


def deleted(ctl: object, reason: str) -> float:
    return sample(ctl.metrics.registry, "sandman_gc_deletions_total", reason=reason)  # type: ignore[attr-defined]


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
        await wait_until_async(lambda: bound_count(ctl) == 3)
        await wait_until_async(lambda: len(ctl.view.bound.cache) >= 3 + 2 + 1)
        for p in ("sb-0", "not-ours"):
            await eventually_running(client, p)
            await inject(client, kind="evict", namespace="default", name=p)
        await wait_until_async(lambda: deleted(ctl, "terminal") == 1, timeout_s=5)
        assert await names(client) == {"sb-1", "sb-2"}
        failed = await client.get(PODS, "not-ours", "default")  # not a sandbox: kept
        assert failed["status"]["phase"] == "Failed"
        events = (await client.list(EVENTS, "default"))["items"]
        assert [(e["involvedObject"]["name"], e["reason"]) for e in events] == [
            ("sb-0", "SandboxDeleted")
        ]
        assert events[0]["message"].endswith(": terminal")


async def finish(client: KubeClient, name: str, phase: str, exit_code: int) -> None:
    """Report the container's exit as the kubelet would (the virtual runtime never exits):
    a status write through the API, the same object a real kubelet sends."""
    p = await client.get(PODS, name, "default")
    status = p["status"]
    status["phase"] = phase
    for cs in status.get("containerStatuses") or ():
        started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
        cs["state"] = {"terminated": {"exitCode": exit_code, "startedAt": started}}
        cs["ready"] = False
    await client.request(
        "PATCH",
        PODS.path("default", name, "status"),
        body={"status": status},
        content_type="application/merge-patch+json",
    )


@pytest.mark.parametrize("cluster_settings", [cluster_of(2, foreign=0.0)])
async def test_idle_exit_has_its_own_reason(cluster: EmbeddedCluster, client: KubeClient) -> None:
    """The daemon's idle exit (Succeeded, exit 0, an idle timeout) is ``idle``; a Succeeded
    sandbox without an idle timeout and a Failed one with it are ``terminal``."""
    async with controller(cluster, gc=FAST_GC) as ctl:
        for name, idle in (("idle", True), ("done", False), ("crashed", True), ("live", True)):
            body = pod(name, app="sandbox")
            if idle:
                body["metadata"]["annotations"] = {FAST_GC.idle_annotation: "30"}
            await client.create(PODS, body, "default")
        await wait_until_async(lambda: bound_count(ctl) == 4)
        for name in ("idle", "done", "crashed"):
            await eventually_running(client, name)
        await finish(client, "idle", "Succeeded", 0)
        await finish(client, "done", "Succeeded", 0)
        await finish(client, "crashed", "Failed", 1)
        await wait_until_async(
            lambda: deleted(ctl, "idle") + deleted(ctl, "terminal") == 3, timeout_s=5
        )
        assert (deleted(ctl, "idle"), deleted(ctl, "terminal")) == (1, 2)
        assert await names(client) == {"live"}
        events = (await client.list(EVENTS, "default"))["items"]
        reasons = {e["involvedObject"]["name"]: e["message"].rsplit(": ", 1)[1] for e in events}
        assert reasons == {"idle": "idle", "done": "terminal", "crashed": "terminal"}
        assert {e["reason"] for e in events} == {"SandboxDeleted"}


async def eventually_running(client: KubeClient, name: str) -> None:
    async def running() -> bool:
        phase = (await client.get(PODS, name, "default"))["status"].get("phase")
        assert phase == "Running", f"{name} is {phase}"
        return True

    await wait_until_async(running, interval_s=0.05)


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
        await wait_until_async(lambda: deleted(ctl, "expired") == 1)
        await wait_until_async(lambda: bound_count(ctl) >= 4)
        await wait_until_async(lambda: deleted(ctl, "pending-timeout") == 2, timeout_s=6)
        remaining = await sandboxes(client)
        assert len(remaining) == bound(remaining) == 4
        assert "expired" not in await names(client)


@pytest.mark.parametrize("cluster_settings", [cluster_of(2, foreign=0.0)])
async def test_sandboxes_on_a_deleted_node_are_removed(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    async with controller(cluster, gc=FAST_GC) as ctl:
        await create_sandboxes(client, 30)
        await wait_until_async(lambda: bound_count(ctl) == 30)
        pods = await sandboxes(client)
        on_node0 = {p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == "node-0"}
        assert on_node0
        await client.delete(NODES, "node-0")
        await wait_until_async(lambda: deleted(ctl, "node-gone") == len(on_node0), timeout_s=5)
        left = await sandboxes(client)
        assert not on_node0 & {p["metadata"]["name"] for p in left}
        assert all(p["spec"]["nodeName"] == "node-1" for p in left)
        assert "node-0" not in ctl.view.scheduler.model.nodes


async def owned(client: KubeClient, n: int, owner: str) -> None:
    for i in range(n):
        body = pod(f"{owner}-{i}", app="sandbox")
        body["metadata"]["labels"]["sandman.io/owner"] = owner
        await client.create(PODS, body, "default")
    lease = {
        "metadata": {"name": owner, "labels": {"sandman.io/owner": owner}},
        "spec": {"holderIdentity": owner, "leaseDurationSeconds": 1},
    }
    await client.create(LEASES, lease, "default")


@pytest.mark.parametrize("cluster_settings", [cluster_of(2)])
async def test_owner_lease_expiry_deletes_that_owners_sandboxes(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    async with controller(cluster, gc=FAST_GC) as ctl:
        await owned(client, 5, "crashed")
        await owned(client, 2, "alive")
        await create_sandboxes(client, 2)  # no owner label: not affected

        async def crashed_collected_while_alive_renews() -> bool:
            # the live trainer renews its Lease; the crashed one does not
            await client.patch(LEASES, "alive", {"spec": {"renewTime": micro_now()}}, "default")
            return deleted(ctl, "owner-expired") >= 5

        await wait_until_async(crashed_collected_while_alive_renews, interval_s=0.2)
        assert deleted(ctl, "owner-expired") == 5
        await wait_until_async(lambda: len(ctl.view.owner_leases.cache) == 2)
        assert await names(client) == {"alive-0", "alive-1", "sb-0", "sb-1"}
        events = (await client.list(EVENTS, "default"))["items"]
        assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events] == [
            ("Lease", "crashed")
        ]
        assert "5 sandboxes of owner crashed" in events[0]["message"]


@pytest.mark.parametrize("cluster_settings", [cluster_of(1)])
async def test_owner_lease_expiry_deletes_that_owners_image_announcements(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    """A crashed trainer's announcements (labelled with its owner, as the facade labels
    them) go with its sandboxes when its Lease expires, not at their ttl; a live owner's and
    an unowned one stay."""
    with contextlib.suppress(AlreadyExists):
        await client.create(CRDS, image_preparation_crd())
    for name, owner in (("p-crashed", "crashed"), ("p-alive", "alive"), ("p-none", None)):
        labels = {"sandman.io/owner": owner} if owner else {}
        body = {"apiVersion": "sandman.io/v1alpha1", "kind": "ImagePreparation",
                "metadata": {"name": name, "labels": labels},
                "spec": {"images": [{"image": "r.local/x:1", "count": 1}]}}  # fmt: skip
        await client.create(IMAGE_PREPARATIONS, body, "default")
    async with controller(cluster, gc=FAST_GC) as ctl:
        await owned(client, 1, "crashed")
        await owned(client, 1, "alive")

        async def crashed_announcement_gone() -> bool:
            await client.patch(LEASES, "alive", {"spec": {"renewTime": micro_now()}}, "default")
            left = await client.list(IMAGE_PREPARATIONS, "default")
            return "p-crashed" not in {o["metadata"]["name"] for o in left["items"]}

        await wait_until_async(crashed_announcement_gone, interval_s=0.2)
        left = await client.list(IMAGE_PREPARATIONS, "default")
        assert {o["metadata"]["name"] for o in left["items"]} == {"p-alive", "p-none"}
        assert deleted(ctl, "owner-expired") == 1

        async def event() -> list[str]:
            items = (await client.list(EVENTS, "default"))["items"]
            return [e["message"] for e in items if e["involvedObject"]["name"] == "crashed"]

        messages = await wait_until_async(event)
        assert "1 sandboxes of owner crashed and 1 image preparations" in messages[0]


def micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def backlog(ctl: object) -> float:
    return sample(ctl.metrics.registry, "sandman_gc_backlog_pods")  # type: ignore[attr-defined]


@pytest.mark.parametrize("cluster_settings", [cluster_of(1, foreign=0.0)])
async def test_gc_backlog_counts_due_sandboxes_until_deleted(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    """sandman_gc_backlog_pods (the GC-backlog alert's metric): sandboxes due for deletion
    that are still there, here because every delete fails; 0 once the deletes go through."""
    async with controller(cluster, gc=FAST_GC) as ctl:
        await inject(client, kind="api-errors", verb="delete", rate=1.0, code=500)
        past = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        for name in ("expired-0", "expired-1"):
            body = pod(name, app="sandbox")
            body["metadata"]["annotations"] = {FAST_GC.expires_annotation: past}
            await client.create(PODS, body, "default")
        await create_sandboxes(client, 1)  # not due: not counted
        await wait_until_async(lambda: backlog(ctl) == 2, timeout_s=5)
        assert deleted(ctl, "expired") == 0
        await inject(client, kind="clear")
        await wait_until_async(lambda: deleted(ctl, "expired") == 2, timeout_s=10)
        await wait_until_async(lambda: backlog(ctl) == 0, timeout_s=5)
        assert await names(client) == {"sb-0"}
