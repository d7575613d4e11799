"""Client-side cost of the controller's API traffic: ``python -m load.bench.controller``.

Runs a simcluster API server (TLS, no flow-control limits) on a thread of this process and
measures, on the client's thread only (``time.thread_time``, so the server's work is not
billed to the client):

1. **transport**: CPU per small request (GET of one object) through kr8s's own transport
   (httpx, ``Api.call_api``) and through :class:`kube.KubeClient` (aiohttp), at
   concurrency 1 and 32. This is the measurement behind the adapter's design.
2. **binds**: ``--pods`` pending pods bound through ``KubeClient.bind`` with 64 in flight
   (no client rate limit): binds per second (wall, server included, one machine) and client
   CPU seconds per 1,000 binds (the issue's target: <= 0.3 s).

Progress goes to stderr; results are one table on stdout. Quote ratios from one run: the
machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kube import NODES, PODS, ClientSettings, KubeClient
from simcluster.apiserver import ServerSettings
from simcluster.embedded import EmbeddedCluster

__all__ = ["main"]


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def _measure(
    n: int, concurrency: int, call: Callable[[], Awaitable[Any]]
) -> tuple[float, float]:
    """(client CPU ms per call, calls per wall second)."""
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            await call()

    for _ in range(min(50, n)):  # warm up connections
        await call()
    cpu, wall = time.thread_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return cpu / n * 1000, n / wall


async def _transport(client: KubeClient, n: int) -> list[tuple[str, str, float, float]]:
    api = client.kr8s

    async def via_kr8s() -> None:
        async with api.call_api("GET", version="v1", url="namespaces/default") as r:
            r.json()

    async def via_aiohttp() -> None:
        await client.request("GET", "/api/v1/namespaces/default")

    rows = []
    for conc in (1, 32):
        for name, fn in (("kr8s (httpx)", via_kr8s), ("KubeClient (aiohttp)", via_aiohttp)):
            _say(f"transport: {name}, concurrency {conc}, {n} GETs")
            cpu_ms, rate = await _measure(n, conc, fn)
            rows.append((name, str(conc), cpu_ms, rate))
    return rows


async def _binds(client: KubeClient, pods: int) -> tuple[float, float]:
    await client.create(NODES, {"metadata": {"name": "bench-node"}})
    _say(f"binds: creating {pods} pending pods")
    sem = asyncio.Semaphore(64)
    uids: list[tuple[str, str]] = []

    async def create(i: int) -> None:
        body = {
            "metadata": {"name": f"sb-{i}"},
            "spec": {"schedulerName": "sandman", "containers": [{"name": "c", "image": "x"}]},
        }
        async with sem:
            p = await client.create(PODS, body, "default")
        uids.append((p["metadata"]["name"], p["metadata"]["uid"]))

    await asyncio.gather(*(create(i) for i in range(pods)))
    _say(f"binds: binding {pods} pods, 64 in flight")
    it = iter(uids)

    async def bind() -> None:
        name, uid = next(it)
        await client.bind("default", name, uid, "bench-node")

    cpu_ms, rate = await _measure(pods - 50, 64, bind)
    return cpu_ms, rate


async def _run(args: argparse.Namespace) -> None:
    with EmbeddedCluster(ServerSettings()) as cluster:
        settings = ClientSettings(qps=0, max_connections=64)
        async with await KubeClient.connect(settings, kubeconfig=str(cluster.kubeconfig)) as c:
            rows = await _transport(c, args.requests)
            bind_cpu_ms, bind_rate = await _binds(c, args.pods)
    print(f"{'transport':<22} {'conc':>4} {'client CPU/request':>19} {'requests/s':>11}")
    for name, conc, cpu_ms, rate in rows:
        print(f"{name:<22} {conc:>4} {cpu_ms:>16.3f} ms {rate:>11.0f}")
    print(
        f"binds: {bind_rate:.0f}/s with 64 in flight; client CPU "
        f"{bind_cpu_ms:.3f} s per 1,000 binds ({args.pods - 50} binds)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench.controller", description=__doc__)
    p.add_argument("--requests", type=int, default=2000, help="GETs per transport measurement")
    p.add_argument("--pods", type=int, default=3000, help="pods to bind")
    asyncio.run(_run(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
