"""The node agent as a real process against simcluster's CRI ImageService on real unix
sockets: bounded parallel pulls, retries with one Event per failed image, re-pulls after the
kubelet's image GC, bounded Lease writes, release of only what it pulled, bad plans, health,
and its RSS budget."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from daemon.node.agent import NODE_EVENTS_NAMESPACE
from daemon.node.bundle import bundle_digest
from kube.light import LightClient
from kube.preparation_contract import (
    ANNOTATION_BUNDLE,
    ANNOTATION_FAILED,
    ANNOTATION_PREPARE,
    ANNOTATION_READY,
    decode_images,
)
from kube.resources import EVENTS, LEASES
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.agents import AGENT_NS, agent_cluster, metric, run_agent
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]
MiB = 2**20


async def plan(api: LightClient, lease: str, images: list[str] | str) -> None:
    value = images if isinstance(images, str) else json.dumps(sorted(images))
    body = {"metadata": {"annotations": {ANNOTATION_PREPARE: value}}}
    await api.patch(LEASES, lease, body, AGENT_NS)


async def ready(api: LightClient, lease: str) -> frozenset[str]:
    obj = await api.get(LEASES, lease, AGENT_NS)
    return decode_images((obj["metadata"].get("annotations") or {}).get(ANNOTATION_READY))


async def published(api: LightClient, lease: str) -> bool:
    """The agent has published at least once (its ready set, empty or not)."""
    obj = await api.get(LEASES, lease, AGENT_NS)
    return ANNOTATION_READY in (obj["metadata"].get("annotations") or {})


def images_on(cluster: EmbeddedCluster, node: str = "node-0") -> set[str]:
    assert cluster.cluster is not None
    return set(cluster.cluster.kubelets[node].images.present)


TASKS = [f"registry.local/task-{i}:1" for i in range(6)]


@pytest.fixture
def cluster_settings() -> ClusterSettings:
    """Pulls of 0.3 s, unlimited on the node (the agent's own bound is what is measured),
    and one image present from the start that the agent did not pull."""
    return agent_cluster(base_s=0.3, preloaded=("registry.local/preloaded:1",))


async def test_pulls_the_plan_two_at_a_time(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    with run_agent(cluster, "node-0", "--pull-parallelism", "2", workdir=tmp_path) as agent:
        await wait_until_async(
            lambda: published(api, agent.lease), retry=(Exception,), what="Lease"
        )
        await plan(api, agent.lease, TASKS)
        await wait_until_async(lambda: set(TASKS) <= images_on(cluster), timeout_s=30)
        await wait_until_async(lambda: _has(api, agent.lease, TASKS), timeout_s=10)
        assert cluster.cluster is not None
        service = cluster.cluster.cri.services["node-0"]  # type: ignore[union-attr]
        assert service.peak_pulls_in_flight == 2  # the agent's bound, and it used it
        assert metric(agent.metrics(), "sandman_node_agent_pulls_total", result="ok") == 6
        assert agent.healthz() == 200


async def _has(api: LightClient, lease: str, images: list[str]) -> bool:
    return set(images) <= await ready(api, lease)


async def test_a_failing_pull_is_retried_and_reported_once(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    image = "registry.local/flaky:1"
    await api.request(
        "POST", "/admin/faults", body={"kind": "pull-fail", "image": image, "times": 3}
    )
    with run_agent(cluster, "node-0", workdir=tmp_path) as agent:
        await wait_until_async(
            lambda: published(api, agent.lease), retry=(Exception,), what="Lease"
        )
        await plan(api, agent.lease, [image])

        async def failure_published() -> bool:
            obj = await api.get(LEASES, agent.lease, AGENT_NS)
            return image in (obj["metadata"]["annotations"].get(ANNOTATION_FAILED) or "")

        await wait_until_async(failure_published, timeout_s=20)
        await wait_until_async(lambda: image in images_on(cluster), timeout_s=30)
        await wait_until_async(lambda: _has(api, agent.lease, [image]), timeout_s=10)
        text = agent.metrics()
        assert metric(text, "sandman_node_agent_pulls_total", result="error") == 3
        events = (await api.list(EVENTS, NODE_EVENTS_NAMESPACE))["items"]
        mine = [e for e in events if e["reason"] == "ImagePrepareFailed"]
        assert len(mine) == 1  # one per failed image (per failure streak), not per attempt
        assert image in mine[0]["message"]
        assert mine[0]["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "node-0"}
        obj = await api.get(LEASES, agent.lease, AGENT_NS)
        assert json.loads(obj["metadata"]["annotations"][ANNOTATION_FAILED]) == {}


@pytest.fixture
def gc_cluster() -> ClusterSettings:
    # 100 MiB images on a 250 MiB image disk: GC above 85% (212 MiB), down to 80%.
    return agent_cluster(base_s=0.2, default_size=100 * MiB, disk_bytes=250 * MiB)


async def test_what_the_image_gc_removed_is_pulled_again(
    gc_cluster: ClusterSettings, tmp_path: Path
) -> None:
    with EmbeddedCluster(gc_cluster) as cluster:
        async with await LightClient.connect(kubeconfig=str(cluster.kubeconfig)) as api:
            wanted = "registry.local/wanted:1"
            with run_agent(cluster, "node-0", workdir=tmp_path) as agent:
                await wait_until_async(
                    lambda: published(api, agent.lease), retry=(Exception,), what="Lease"
                )
                await plan(api, agent.lease, [wanted])
                await wait_until_async(lambda: wanted in images_on(cluster), timeout_s=20)
                assert cluster.cluster is not None
                cache = cluster.cluster.kubelets["node-0"].images
                for other in ("registry.local/pod-a:1", "registry.local/pod-b:1"):
                    cluster.call(lambda other=other: cache.pull(other))  # pods' pulls
                assert wanted in cache.removed_by_gc  # the least recently used went
                await wait_until_async(
                    lambda: metric(agent.metrics(), "sandman_node_agent_repulls_total") >= 1,
                    timeout_s=20,
                )
                await wait_until_async(lambda: wanted in images_on(cluster), timeout_s=20)


async def test_lease_writes_stay_within_their_bound(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    """Six pulls finishing over ~1 s are published in at most one write per interval (1 s),
    not one write per image."""
    flags = ("--min-write-interval-s", "1", "--pull-parallelism", "6")
    with run_agent(cluster, "node-0", *flags, workdir=tmp_path) as agent:
        await wait_until_async(
            lambda: published(api, agent.lease), retry=(Exception,), what="Lease"
        )
        start = time.monotonic()
        await plan(api, agent.lease, TASKS)
        await wait_until_async(lambda: _has(api, agent.lease, TASKS), timeout_s=20)
        await wait_until_async(lambda: time.monotonic() - start > 3)  # let writes settle
        elapsed = time.monotonic() - start
        text = agent.metrics()
        writes = metric(text, "sandman_node_agent_lease_writes_total")
        acquire = metric(text, "sandman_node_agent_lease_writes_total", cause="acquire")
        # the acquisition, the first publication at start, then one per second at most
        assert writes - acquire <= 1 + elapsed / 1.0 + 1
        assert writes - acquire < 6


async def test_release_removes_what_it_pulled_and_nothing_else(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    pulled, preloaded = "registry.local/task-9:1", "registry.local/preloaded:1"
    with run_agent(cluster, "node-0", "--release-after-s", "0.5", workdir=tmp_path) as agent:
        await wait_until_async(
            lambda: published(api, agent.lease), retry=(Exception,), what="Lease"
        )
        await plan(api, agent.lease, [pulled, preloaded])
        await wait_until_async(lambda: _has(api, agent.lease, [pulled, preloaded]), timeout_s=20)
        await plan(api, agent.lease, [])
        await wait_until_async(lambda: pulled not in images_on(cluster), timeout_s=20)
        assert preloaded in images_on(cluster)  # never pulled by the agent: never removed
        assert metric(agent.metrics(), "sandman_node_agent_images_removed_total") == 1
        state = json.loads((tmp_path / "state" / "pulled-node-0.json").read_text())
        assert state == []


async def test_a_malformed_plan_reads_as_empty_and_the_agent_keeps_running(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    with run_agent(cluster, "node-0", workdir=tmp_path) as agent:
        await wait_until_async(
            lambda: published(api, agent.lease), retry=(Exception,), what="Lease"
        )
        await plan(api, agent.lease, '{"not": "a list"')
        await plan(api, agent.lease, ["registry.local/task-1:1"])
        await wait_until_async(lambda: _has(api, agent.lease, ["registry.local/task-1:1"]))
        assert agent.process.poll() is None


async def test_the_agent_stays_under_50_mib_and_loads_no_heavy_client(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    with run_agent(cluster, "node-0", workdir=tmp_path) as agent:
        await wait_until_async(
            lambda: published(api, agent.lease), retry=(Exception,), what="Lease"
        )
        await plan(api, agent.lease, TASKS)
        await wait_until_async(lambda: _has(api, agent.lease, TASKS), timeout_s=30)
        rss = psutil.Process(agent.process.pid).memory_info().rss
        print(f"agent RSS {rss / MiB:.1f} MiB")
        assert rss <= 50 * MiB, f"RSS {rss / MiB:.1f} MiB"
    probe = (
        "import sys, daemon.node.__main__, daemon.node.app, daemon.node.agent;"
        "heavy = ('kr8s', 'aiohttp', 'httpx', 'kube.client', 'prometheus_client');"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


async def test_the_agent_keeps_the_bundle_and_publishes_its_digest(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    source = tmp_path / "bundle"
    (source / "_internal").mkdir(parents=True)
    (source / "sandman-daemon").write_text("daemon")
    root = tmp_path / "hostpath"
    flags = ("--bundle-source", str(source), "--bundle-root", str(root))
    with run_agent(cluster, "node-0", *flags, workdir=tmp_path) as agent:

        async def digest() -> str | None:
            obj = await api.get(LEASES, agent.lease, AGENT_NS)
            return (obj["metadata"].get("annotations") or {}).get(ANNOTATION_BUNDLE)

        published = await wait_until_async(digest, retry=(Exception,), timeout_s=20)
        assert published == bundle_digest(source) == os.readlink(root / "current")
        assert (root / "current" / "sandman-daemon").read_text() == "daemon"
