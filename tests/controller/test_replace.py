"""Kubelet admission rejections: a sandbox rejected before it ran is replaced and placed
elsewhere; one that ever ran is not; attempts are bounded."""

from __future__ import annotations

import pytest

from controller.replace import Replacer, ReplacerSettings, rejected_before_running
from controller.view import ClusterView
from kube import PODS, KubeClient, NotFound
from scheduler import Scheduler
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import cluster_of, controller, create_sandboxes
from tests.support.metrics import sample
from tests.support.pods import pod
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


def rejected(**status: object) -> dict:
    base = {"phase": "Failed", "reason": "OutOfcpu", "message": "Pod was rejected"}
    return {
        "metadata": {"name": "sb", "namespace": "default", "uid": "u1", "labels": {"a": "b"}},
        "spec": {"schedulerName": "sandman", "nodeName": "n1", "containers": []},
        "status": base | status,
    }


async def test_rejected_before_running_rules() -> None:
    assert rejected_before_running(rejected())
    assert not rejected_before_running(rejected(reason="Evicted"))
    assert not rejected_before_running(
        rejected(containerStatuses=[{"state": {"terminated": {"exitCode": 1}}}])
    )
    assert not rejected_before_running(rejected(conditions=[{"type": "Ready", "status": "True"}]))
    assert not rejected_before_running(rejected(phase="Running"))


async def test_replacement_pod_and_bounded_attempts(client: KubeClient) -> None:
    r = Replacer(client, ClusterView(client, Scheduler()), ReplacerSettings(max_attempts=2))
    first = r.replacement(rejected())
    assert first is not None
    assert first["metadata"]["name"] == "sb-r1"
    assert first["metadata"]["labels"] == {"a": "b"}
    assert first["metadata"]["annotations"] == {
        "sandman.io/replaces": "sb",
        "sandman.io/attempt": "1",
    }
    assert "nodeName" not in first["spec"]
    again = rejected()
    again["metadata"] = first["metadata"] | {"uid": "u2"}
    second = r.replacement(again)
    assert second is not None and second["metadata"]["name"] == "sb-r2"
    third = rejected()
    third["metadata"] = second["metadata"] | {"uid": "u3"}
    assert r.replacement(third) is None


@pytest.mark.parametrize("cluster_settings", [cluster_of(2, cpu="1", foreign=0.0)])
async def test_rejected_sandbox_is_replaced_and_bound_elsewhere(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    async with controller(cluster) as ctl:
        await create_sandboxes(client, 1)
        await wait_until_async(
            lambda: sample(ctl.metrics.registry, "sandman_binds_total", outcome="bound") == 1
        )
        node = (await client.get(PODS, "sb-0", "default"))["spec"]["nodeName"]
        # A sandbox placed on `node` a moment before its capacity was taken: 1 CPU no
        # longer fits there, so the kubelet rejects it (OutOfcpu) before it runs.
        big = pod("big", app="sandbox")
        big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
        big["spec"]["nodeName"] = node
        await client.create(PODS, big, "default")
        await wait_until_async(
            lambda: (
                sample(ctl.metrics.registry, "sandman_replacements_total", outcome="replaced") == 1
            )
        )
        with pytest.raises(NotFound):
            await client.get(PODS, "big", "default")
        await wait_until_async(
            lambda: sample(ctl.metrics.registry, "sandman_binds_total", outcome="bound") == 2
        )
        new = await client.get(PODS, "big-r1", "default")
        assert new["spec"]["nodeName"] != node
        assert new["metadata"]["labels"] == {"app": "sandbox"}
        assert new["metadata"]["annotations"]["sandman.io/replaces"] == "big"
