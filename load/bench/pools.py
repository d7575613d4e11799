"""How fast an announced pool fills, and how much of its flow-control level it uses:
``python -m load.bench.pools``.

An embedded simcluster (virtual kubelets) implementing API Priority and Fairness from the
manifests' objects (manifests/access/flowcontrol.yaml, applied at start), its server budget
sized so that the ``sandman-pools`` level gets ``--level-qps`` writes/s (10 of the 305
shares); a real controller in this process (the process's own ``Controller``, no election,
its SA's kubeconfig, so the FlowSchemas match it) with the pool filler set to the same
``--level-qps``; then, per round, one announcement of ``--slots`` sandboxes (one image,
the facade's pool template) and the time until every slot's pod exists, from the API
server's answers (a pod list per 0.2 s). Reported per round and as medians: the fill's
seconds, its rate, the share of the level's budget it used ((slots - the level's one-second
burst) / (seconds x level rate)), the filler's creates answered 429, and the writes/s the
server dispatched in the
``sandman-pools`` level (simcluster's apiserver_flowcontrol_dispatched_requests_total).

What it does not measure: a real kube-apiserver's APF (seats and queues, not a token
bucket), real kubelets; the fill is API-bound here by construction.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from controller.app import Controller, ControllerSettings
from controller.pools import PoolSettings
from devstack.crds import image_preparation_crd, sandbox_claim_crd
from facade.podspec import DaemonDelivery, SandboxClass, render_pool_template
from kube import PODS, ClientSettings, KubeClient
from kube.pool_contract import LABEL_POOL
from kube.preparation_contract import IMAGE_PREPARATIONS
from kube.resources import Resource
from simcluster.apiserver import ServerSettings
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[2]
APF = "flowcontrol.apiserver.k8s.io"
LEVELS = Resource(APF, "v1", "prioritylevelconfigurations", "PriorityLevelConfiguration", False)
SCHEMAS = Resource(APF, "v1", "flowschemas", "FlowSchema", False)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)
#: Every level's shares once the manifests' are in, and the pools level's (flowcontrol.yaml).
TOTAL_SHARES, POOL_SHARES = 305, 10
NS = "default"


@contextlib.asynccontextmanager
async def controller(kubeconfig: str, level_qps: float) -> AsyncIterator[Controller]:
    pools = PoolSettings(
        qps=level_qps, burst=max(1, int(level_qps)), interval_s=0.1, batch=int(level_qps) * 2
    )
    settings = ControllerSettings(
        kubeconfig=kubeconfig, client=ClientSettings(qps=0, burst=0), election=None,
        placement_auth=None, prepare=None, pools=pools, health_port=0,
        progress_interval_s=3600, freeze_after_sync=False,
    )  # fmt: skip
    c = Controller(settings)
    task = asyncio.create_task(c.run())
    try:
        while not (c.placement is not None and c.placement.serving and c.pools is not None):
            if task.done():
                await task
            await asyncio.sleep(0.05)
        yield c
    finally:
        c.stop()
        async with asyncio.timeout(30):
            await task


def announcement(name: str, slots: int) -> dict[str, Any]:
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    template = render_pool_template(
        "registry.local/bench:1", SandboxClass("tiny", cpu="1m", memory="1Mi"),
        DaemonDelivery("host-path"), announcement=name, namespace=NS, tenant="bench",
        pool_token="bench", expires_at=expires,
    )  # fmt: skip
    return {
        "apiVersion": IMAGE_PREPARATIONS.api_version,
        "kind": IMAGE_PREPARATIONS.kind,
        "metadata": {"name": name},
        "spec": {
            "images": [{"image": "registry.local/bench:1", "count": slots}],
            "expiresAt": expires.isoformat(),
            "sandboxes": True,
            "class": "tiny",
            "podTemplate": template,
        },
    }


def dispatched(metrics_text: str, level: str) -> float:
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("apiserver_flowcontrol_dispatched_requests_total{") and (
            f'priority_level="{level}"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def one_round(
    cluster: EmbeddedCluster,
    api: KubeClient,
    c: Controller,
    name: str,
    slots: int,
    level_qps: float,
) -> dict[str, float]:
    def metrics() -> str:
        assert cluster.server is not None
        return cluster.server.metrics.render().decode()

    before = dispatched(metrics(), "sandman-pools")
    throttled0 = _sample(c, "throttled")
    started = time.monotonic()
    await api.create(IMAGE_PREPARATIONS, announcement(name, slots), NS)
    while True:
        listed = await api.list(PODS, NS, label_selector=f"{LABEL_POOL}={name}")
        if len(listed["items"]) >= slots:
            break
        await asyncio.sleep(0.2)
    seconds = time.monotonic() - started
    writes = dispatched(metrics(), "sandman-pools") - before
    await api.delete(IMAGE_PREPARATIONS, name, NS)
    await _emptied(api, name)
    return {
        "seconds": seconds,
        "rate_per_s": slots / seconds,
        # The level's first second of writes is its burst (server burst = rate): beyond it,
        # the fill can use at most level_qps.
        "budget_used": (slots - level_qps) / (seconds * level_qps),
        "throttled": _sample(c, "throttled") - throttled0,
        "level_writes_per_s": writes / seconds,
    }


async def _emptied(api: KubeClient, name: str) -> None:
    """The filler deletes the pool once its announcement is gone: the next round starts empty
    (polled: the API server is what is asked, as a trainer would)."""
    for _ in range(600):
        if not (await api.list(PODS, NS, label_selector=f"{LABEL_POOL}={name}"))["items"]:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the pool of {name} was not deleted within 300 s")


def _sample(c: Controller, outcome: str) -> float:
    for metric in c.metrics.registry.collect():
        if metric.name == "sandman_pool_creates":
            for s in metric.samples:
                if s.name.endswith("_total") and s.labels.get("outcome") == outcome:
                    return float(s.value)
    return 0.0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server_rate = args.level_qps * TOTAL_SHARES / POOL_SHARES
    flow = {"server": {"mutating": {"rate": server_rate, "burst": server_rate}}}
    nodes = NodeSettings(cpu="100000", memory="100000Gi", max_pods=1_000_000)
    settings = ClusterSettings(
        server=ServerSettings(bookmark_interval_s=1.0, flowcontrol=flow),
        nodes=args.nodes,
        node=nodes,
        foreign_fraction=0.0,
        service_account_kubeconfigs=(("controller", "sandman-system/sandman-controller"),),
    )
    with EmbeddedCluster(settings) as cluster:
        assert cluster.cluster is not None
        admin = ClientSettings(qps=0, burst=0)
        async with await KubeClient.connect(admin, kubeconfig=str(cluster.kubeconfig)) as api:
            for crd in (image_preparation_crd(), sandbox_claim_crd()):
                await api.create(CRDS, crd)
            text = (ROOT / "manifests" / "access" / "flowcontrol.yaml").read_text()
            for doc in yaml.safe_load_all(text):
                if doc:
                    await api.create(LEVELS if doc["kind"].startswith("Priority") else SCHEMAS, doc)
            kubeconfig = str(cluster.cluster.kubeconfigs["controller"])
            async with controller(kubeconfig, args.level_qps) as c:
                rounds = []
                for i in range(args.rounds):
                    name = f"prep-bench-{i}"
                    r = await one_round(cluster, api, c, name, args.slots, args.level_qps)
                    print(json.dumps({"round": i, **{k: round(v, 3) for k, v in r.items()}}))
                    rounds.append(r)
    medians = {k: round(statistics.median(r[k] for r in rounds), 3) for k in rounds[0]}
    result = {"slots": args.slots, "level_qps": args.level_qps, "rounds": args.rounds, **medians}
    print(json.dumps({"median": result}))
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slots", type=int, default=1000, help="sandboxes per announcement")
    p.add_argument("--level-qps", type=float, default=50.0, help="the pools level's writes/s")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nodes", type=int, default=20)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
