"""What a pool saves a create: ``python -m load.bench.pooled``.

An embedded simcluster whose pods are real processes (the process runtime: every sandbox,
pooled or cold, runs a real daemon), a real controller (claims and placements served, no
election) and a real facade in this process. Each round makes ``--batch`` pool pods through
the pool contract (``facade.podspec.render_pool_template`` + ``kube.pool_contract.pool_pod``,
as the announcements' filler will), waits until the leader offers them, then sends two
batches of ``--batch`` through the facade's HTTP API, in turn: one that claims the pool
(pooled) and one that finds it empty (cold: pre-placed creates, the kubelet, the daemon's
start). Each arm's figure is request sent → every member Ready (the create's answer, then
``GET ?wait=ready`` of each). Both batches are released before the next round, so every
round starts from the same cluster; the arms alternate, so machine noise lands on both.

Reported per arm: median and p90 over the rounds, and the claims the facade counted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import secrets
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from controller.app import Controller, ControllerSettings
from devstack.crds import sandbox_claim_crd
from devstack.sandbox_python import stage_daemon_python
from facade.app import Facade, FacadeSettings
from facade.config import FacadeConfig, load_config
from facade.podspec import render_pool_template
from kube import PODS, AlreadyExists, ClientSettings, KubeClient
from kube.placement import PlacementClientSettings
from kube.pool_contract import LABEL_POOL, pool_pod
from kube.resources import Resource
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings

IMAGE, CLASS, NAMESPACE, TENANT = "registry.local/bench:1", "tiny", "bench", "bench"
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
UNLIMITED = ClientSettings(qps=0, burst=0)


@contextlib.asynccontextmanager
async def controller(kubeconfig: str) -> AsyncIterator[Controller]:
    settings = ControllerSettings(
        kubeconfig=kubeconfig, client=UNLIMITED, election=None, placement_auth=None,
        prepare=None, health_port=0, progress_interval_s=3600, freeze_after_sync=False,
    )  # fmt: skip
    c = Controller(settings)
    task = asyncio.create_task(c.run())
    try:
        while not (c.claims is not None and c.claims.serving and c.health_url):
            if task.done():
                await task
            await asyncio.sleep(0.05)
        yield c
    finally:
        c.stop()
        async with asyncio.timeout(20):
            await task


def _config(workdir: Path, token: str, python: str) -> FacadeConfig:
    document = {
        "secret": secrets.token_urlsafe(48),
        "delivery": {"mode": "local-process", "python": [python]},
        "classes": [{"name": CLASS}],
        "tenants": [{
            "name": TENANT, "namespace": NAMESPACE,
            "token_sha256": [hashlib.sha256(token.encode()).hexdigest()],
            "max_sandboxes": 500, "create_burst": 500, "create_rate_per_s": 1000,
        }],
    }  # fmt: skip
    path = workdir / "facade.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_config(path)


async def _make_pool(client: KubeClient, config: FacadeConfig, n: int, round_: int) -> None:
    announcement = f"bench-{round_}"
    template = render_pool_template(
        IMAGE, config.classes[CLASS], config.delivery, announcement=announcement,
        namespace=NAMESPACE, tenant=TENANT,
        pool_token=config.minter.pool_token_for(NAMESPACE, announcement),
        expires_at=datetime.now(UTC) + timedelta(hours=1),
    )  # fmt: skip
    for slot in range(n):
        body = pool_pod(template, announcement, 0, IMAGE, slot)
        body["spec"]["nodeName"] = f"node-{slot % 2}"
        await client.create(PODS, body, NAMESPACE)


async def _until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


async def _batch_ready(http: aiohttp.ClientSession, n: int, owner: str) -> float:
    """Seconds from the request to every member Ready."""
    started = time.monotonic()
    spec = {"image": IMAGE, "owner": owner}
    async with http.post("/v1/batches", json={"spec": spec, "count": n}) as r:
        assert r.status == 201, await r.text()
        sandboxes = (await r.json())["sandboxes"]
    for s in sandboxes:
        if s["state"] != "ready":
            async with http.get(f"/v1/sandboxes/{s['id']}", params={"wait": "ready"}) as r:
                assert (await r.json())["state"] == "ready"
    return time.monotonic() - started


async def run(rounds: int, batch: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    token = secrets.token_hex(16)  # never starts with "-" (devstack/stack.py)
    node = NodeSettings(cpu="16", memory="64Gi", max_pods=110, preloaded_images=(IMAGE,))
    results: dict[str, list[float]] = {"pooled": [], "cold": []}
    claims: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-pooled-") as tmp:
        # The daemon's Python staged outside the checkout (devstack/sandbox_python.py).
        python = stage_daemon_python(Path(tmp) / "python")
        settings = ClusterSettings(
            nodes=2, runtime="process", node=node, foreign_fraction=0.0,
            process_binds=python.binds,
        )  # fmt: skip
        with EmbeddedCluster(settings, Path(tmp) / "cluster") as cluster:
            await _run_in(cluster, Path(tmp), token, python.executable, rounds, batch,
                          results, claims)  # fmt: skip
    return results, claims


async def _run_in(
    cluster: EmbeddedCluster,
    tmp: Path,
    token: str,
    python: str,
    rounds: int,
    batch: int,
    results: dict[str, list[float]],
    claims: dict[str, int],
) -> None:
    """The controller and the facade on ``cluster``, and the rounds."""
    kubeconfig = str(cluster.kubeconfig)
    async with await KubeClient.connect(UNLIMITED, kubeconfig=kubeconfig) as client:
        await client.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
        with contextlib.suppress(AlreadyExists):
            await client.create(CRDS, sandbox_claim_crd())
        config = _config(tmp, token, python)
        async with controller(kubeconfig) as c:
            placement = PlacementClientSettings(url=c.health_url)
            facade = Facade(
                FacadeSettings(port=0, kubeconfig=kubeconfig, placement=placement), config
            )
            await facade.start()
            try:
                headers = {"Authorization": f"Bearer {token}"}
                async with aiohttp.ClientSession(facade.url, headers=headers) as http:
                    for r in range(rounds):
                        await _round(client, c, http, config, r, batch, results)
                        print(
                            f"round {r + 1}/{rounds}: pooled {results['pooled'][-1]:.3f} s,"
                            f" cold {results['cold'][-1]:.3f} s",
                            flush=True,
                        )
                registry = facade.metrics.registry
                for outcome in ("hit", "partial", "miss", "failed"):
                    value = registry.get_sample_value(
                        "sandman_facade_pool_claims_total", {"outcome": outcome}
                    )
                    claims[outcome] = int(value or 0)
            finally:
                await facade.stop()


async def _round(
    client: KubeClient,
    c: Controller,
    http: aiohttp.ClientSession,
    config: FacadeConfig,
    r: int,
    batch: int,
    results: dict[str, list[float]],
) -> None:
    await _make_pool(client, config, batch, r)
    assert c.claims is not None
    book = c.claims.book

    async def offered() -> bool:
        return book.counts((NAMESPACE, IMAGE, CLASS))["ready"] == batch

    await _until(offered, 60, "the pool offered")
    arms = ("pooled", "cold")  # the pool is claimed by the first batch, found empty after
    for arm in arms:
        results[arm].append(await _batch_ready(http, batch, f"{arm}-{r}"))
    for arm in arms:
        async with http.delete("/v1/sandboxes", params={"owner": f"{arm}-{r}"}) as resp:
            assert resp.status < 300, await resp.text()

    async def gone() -> bool:
        pods = (await client.list(PODS, NAMESPACE))["items"]
        live = [p for p in pods if not (p["metadata"].get("labels") or {}).get(LABEL_POOL)]
        pooled = [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_POOL)]
        return not live and not pooled

    await _until(gone, 60, "the round's sandboxes deleted")


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    results, claims = asyncio.run(run(args.rounds, args.batch))
    print(f"\nbatch of {args.batch}, {args.rounds} rounds: request -> every member Ready")
    print("| arm | median | p90 |\n|---|---|---|")
    for arm, values in results.items():
        median, p90 = statistics.median(values) * 1000, _p90(values) * 1000
        print(f"| {arm} | {median:.0f} ms | {p90:.0f} ms |")
    print(f"\nclaims the facade counted: {claims} (each round: one hit, then one miss)")
    pooled, cold = statistics.median(results["pooled"]), statistics.median(results["cold"])
    print(f"\ncold / pooled (medians): {cold / pooled:.1f}x")


if __name__ == "__main__":
    main()
