"""The pool filler is polite on the server side too: with the manifests' API Priority and
Fairness objects (manifests/access/flowcontrol.yaml) applied to a simcluster that implements
APF from them, a pool fill pushed far past its level's budget gets its 429s in the
``sandman-pools`` level, and the facade's creates beside it (``sandman-workload``) get none.

The counterfactual is measured too: the same fill sent as the controller itself (``identity
""``) lands in the facade's level and takes its budget — the facade's creates then see 429s.
So the test can fail, and what keeps the facade whole is the level, not luck.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
import yaml

from controller.pools import PoolSettings
from kube import PODS, KubeClient
from kube.errors import TooManyRequests
from kube.resources import Resource
from simcluster.apiserver import ServerSettings
from simcluster.cluster import ClusterSettings, NodeSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.kube import FAST
from tests.support.manifests import ROOT
from tests.support.metrics import sample
from tests.support.placement import placing_controller
from tests.support.pods import pod
from tests.support.pools import announce, pool_pods
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

APF = "flowcontrol.apiserver.k8s.io"
LEVELS = Resource(APF, "v1", "prioritylevelconfigurations", "PriorityLevelConfiguration", False)
SCHEMAS = Resource(APF, "v1", "flowschemas", "FlowSchema", False)
#: 305 shares in all once the manifests' levels are in (the built-in node-high 40,
#: workload-low 100, global-default 20; binds 60, election 5, workload 60, agents 10, pools
#: 10): the workload level gets 60 writes/s, the pools level 10.
FLOW = {"server": {"mutating": {"rate": 305, "burst": 305}}}
FACADE_RATE, FACADE_CREATES = 20.0, 60  # well inside the workload level's 60/s
SLOTS = 400  # minutes at the pools level's 10/s; seconds of pressure past the workload's 60/s
#: Far past the pools level's 10/s: the filler's pacer is what slows it down.
PUSH = PoolSettings(qps=300, burst=100, interval_s=0.05, batch=SLOTS, status_interval_s=1.0)


@pytest.fixture
def cluster() -> Iterator[EmbeddedCluster]:
    settings = ClusterSettings(
        server=ServerSettings(bookmark_interval_s=1.0, flowcontrol=FLOW),
        nodes=4,
        node=NodeSettings(cpu="64", memory="256Gi", max_pods=200),
        foreign_fraction=0.0,
        service_account_kubeconfigs=(
            ("controller", "sandman-system/sandman-controller"),
            ("facade", "sandman-system/sandman-facade"),
        ),
    )
    with EmbeddedCluster(settings) as c:
        yield c


async def _apply_flowcontrol(client: KubeClient) -> None:
    text = (ROOT / "manifests" / "access" / "flowcontrol.yaml").read_text()
    for doc in yaml.safe_load_all(text):
        if doc:
            await client.create(LEVELS if doc["kind"].startswith("Priority") else SCHEMAS, doc)


async def _facade_creates(cluster: EmbeddedCluster) -> int:
    """FACADE_CREATES pre-placed creates as the facade's account, at FACADE_RATE, one
    attempt each: how many were answered 429."""
    assert cluster.cluster is not None
    kubeconfig = str(cluster.cluster.kubeconfigs["facade"])
    throttled = 0
    async with await KubeClient.connect(FAST, kubeconfig=kubeconfig) as base:
        client = base.with_rate_limit(FACADE_RATE, 1, max_attempts=1)

        async def one(i: int) -> None:
            nonlocal throttled
            body = pod(f"cold-{i}", app="cold")
            body["spec"]["nodeName"] = f"node-{i % 4}"
            try:
                await client.create(PODS, body, "default")
            except TooManyRequests:
                throttled += 1

        await asyncio.gather(*(one(i) for i in range(FACADE_CREATES)))
    return throttled


@pytest.mark.parametrize(
    ("identity", "isolated"),
    [(PoolSettings().identity, True), ("", False)],
    ids=["as-sandman-pools", "as-the-controller"],
)
async def test_filling_a_pool_does_not_raise_the_facade_levels_429s(
    cluster: EmbeddedCluster, client: KubeClient, identity: str, isolated: bool
) -> None:
    await _apply_flowcontrol(client)
    images = (("registry.local/a:1", SLOTS),)
    pools = dataclasses.replace(PUSH, identity=identity)
    async with placing_controller(cluster, "a", pools=pools) as a:
        await announce(client, images)
        registry = a.metrics.registry
        # The fill is under way, and pushing past its level: then the facade creates.
        await wait_until_async(lambda: _throttled(registry) > 0 or _created(registry) > 20)
        facade_429s = await _facade_creates(cluster)
        if isolated:
            assert facade_429s == 0
            assert _throttled(registry) > 0  # the pools level pushed back, on the pools only
            # ...and the fill goes on within its level.
            before = len(await pool_pods(client))

            async def more() -> bool:
                return len(await pool_pods(client)) >= before + 10

            await wait_until_async(more, timeout_s=30)
        else:
            assert facade_429s > 0  # the same fill in the facade's level takes its budget
        with contextlib.suppress(Exception):
            await client.delete_collection(PODS, "default", label_selector="app=cold")


def _throttled(registry: object) -> float:
    return sample(registry, "sandman_pool_creates_total", outcome="throttled")  # type: ignore[arg-type]


def _created(registry: object) -> float:
    return sample(registry, "sandman_pool_creates_total", outcome="created")  # type: ignore[arg-type]
