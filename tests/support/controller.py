"""The controller's parts run in-process against a simulated cluster with nodes, the
controller authenticated as its own service account so simcluster's
``apiserver_request_total`` counts its writes separately from the test's; and what tests
read back: the sandboxes, how many are bound, and the writes each user made."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from controller.binder import Binder, BinderSettings
from controller.collector import GarbageCollector, GCSettings
from controller.metrics import ControllerMetrics
from controller.replace import Replacer
from controller.view import ClusterView, ViewSettings
from kube import PODS, AlreadyExists, KubeClient, ServerError
from scheduler import Scheduler, SchedulerSettings
from simcluster.apiserver import ServerSettings
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings
from tests.support.kube import FAST
from tests.support.pods import pod

__all__ = [
    "CONTROLLER_SA",
    "CONTROLLER_USER",
    "VIEW",
    "Running",
    "bound",
    "cluster_of",
    "controller",
    "create_sandboxes",
    "sandboxes",
    "server_requests",
    "writes_by",
]

CONTROLLER_SA = "sandman-system/controller"
CONTROLLER_USER = "system:serviceaccount:sandman-system:controller"
VIEW = ViewSettings()  # unbound pods selected server-side (`spec.nodeName=`), as in production


def cluster_of(nodes: int, cpu: str = "16", foreign: float = 0.3) -> ClusterSettings:
    """``nodes`` nodes of ``cpu`` CPUs, a ``foreign`` share of each held by other tenants, and
    a kubeconfig ``controller`` for the controller's service account."""
    return ClusterSettings(
        server=ServerSettings(bookmark_interval_s=1.0),
        nodes=nodes,
        node=NodeSettings(cpu=cpu, memory="64Gi", max_pods=110),
        foreign_fraction=foreign,
        service_account_kubeconfigs=(("controller", CONTROLLER_SA),),
    )


async def sandboxes(client: KubeClient) -> list[dict]:
    return (await client.list(PODS, "default", label_selector="app=sandbox"))["items"]


def bound(pods: list[dict]) -> int:
    return sum(1 for p in pods if p["spec"].get("nodeName"))


@dataclass
class Running:
    client: KubeClient
    view: ClusterView
    binder: Binder
    metrics: ControllerMetrics
    gc: GarbageCollector | None
    replacer: Replacer


@asynccontextmanager
async def controller(
    cluster: EmbeddedCluster,
    settings: BinderSettings | None = None,
    scheduler: SchedulerSettings | None = None,
    gc: GCSettings | None = None,
) -> AsyncIterator[Running]:
    assert cluster.cluster is not None
    kubeconfig = cluster.cluster.kubeconfigs["controller"]
    metrics = ControllerMetrics()
    async with await KubeClient.connect(
        FAST, kubeconfig=str(kubeconfig), observer=metrics.observe_request
    ) as client:
        view = ClusterView(client, Scheduler(scheduler or SchedulerSettings()), VIEW)
        binder = Binder(client, view, settings, metrics)
        binder.attach()
        collector = GarbageCollector(client, view, gc, metrics) if gc else None
        replacer = Replacer(client, view, metrics=metrics)
        replacer.attach()
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(view.run()),
                tg.create_task(binder.run()),
                tg.create_task(replacer.run()),
            ]
            if collector is not None:
                tasks.append(tg.create_task(collector.run()))
            async with asyncio.timeout(10):
                await view.wait_synced()
            try:
                yield Running(client, view, binder, metrics, collector, replacer)
            finally:
                for t in tasks:
                    t.cancel()


async def create_sandboxes(
    client: KubeClient, n: int, ns: str = "default", *, start: int = 0
) -> None:
    """Create sandbox pods ``sb-<start>``... 64 at a time, as a trainer's facade would.

    A create that fails with a 5xx is repeated; AlreadyExists then means it had landed."""
    sem = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        async with sem:
            for _ in range(20):
                try:
                    await client.create(PODS, pod(f"sb-{i}", app="sandbox"), ns)
                    return
                except AlreadyExists:
                    return
                except ServerError:
                    continue
            raise AssertionError(f"could not create sb-{i}")

    await asyncio.gather(*(one(i) for i in range(start, start + n)))


def server_requests(cluster: EmbeddedCluster) -> list[tuple[dict[str, str], float]]:
    """``apiserver_request_total`` samples from simcluster's own /metrics registry."""
    assert cluster.server is not None
    text = cluster.server.metrics.render().decode()
    out = []
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        out.append((labels, float(line.rsplit(" ", 1)[1])))
    return out


def writes_by(cluster: EmbeddedCluster, user: str, **match: Any) -> float:
    mutating = {"create", "update", "patch", "delete", "deletecollection"}
    return sum(
        v
        for labels, v in server_requests(cluster)
        if labels["user"] == user
        and labels["verb"] in mutating
        and all(labels.get(k) == str(want) for k, want in match.items())
    )
