"""What authenticating the placement endpoint costs per call: ``python -m
load.bench.placement_auth``.

An embedded simcluster (virtual kubelets) and real controllers in this process (the
process's own ``Controller``, no election, so each leads): one with placement auth on
(controller/placement_auth.py: TokenReview, cached) and one with it off
(``placement_auth=None``), and a third with auth on and no cache (``cache_ttl_s=0``: one
TokenReview per call). The placement calls alternate between the three — one interleaved
series, so machine noise lands on both arms alike — each a ``POST /internal/v1/placements``
of ``--batch`` fresh pod names with the admin's bearer token, over one keep-alive session,
as the facade sends them. Reported per arm: median, p90 and p99 latency, and the
TokenReviews the auth arm sent (with the cache, one per token per TTL).

The cluster is sized so nothing runs out during the run (every call plans and reserves).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator

import aiohttp

from controller.app import Controller, ControllerSettings
from controller.placement_auth import PlacementAuthSettings
from kube import ClientSettings, KubeClient
from kube.placement import PLACEMENT_PATH
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings

TEMPLATE = {
    "metadata": {"labels": {"app": "bench"}},
    "spec": {
        "schedulerName": "sandman",
        "containers": [{"name": "c", "image": "task:1",
                        "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}],
    },
}  # fmt: skip


@contextlib.asynccontextmanager
async def controller(
    kubeconfig: str, auth: PlacementAuthSettings | None
) -> AsyncIterator[Controller]:
    settings = ControllerSettings(
        kubeconfig=kubeconfig, client=ClientSettings(qps=0, burst=0), election=None,
        placement_auth=auth, prepare=None, health_port=0, progress_interval_s=3600,
        freeze_after_sync=False,
    )  # fmt: skip
    c = Controller(settings)
    task = asyncio.create_task(c.run())
    try:
        while not (c.placement is not None and c.placement.serving and c.health_url):
            if task.done():
                await task
            await asyncio.sleep(0.05)
        yield c
    finally:
        c.stop()
        async with asyncio.timeout(15):
            await task


def summary(samples: list[float]) -> str:
    ms = sorted(s * 1e3 for s in samples)
    p = statistics.quantiles(ms, n=100)
    return f"median {statistics.median(ms):.2f} ms, p90 {p[89]:.2f} ms, p99 {p[98]:.2f} ms"


async def run(args: argparse.Namespace) -> None:
    nodes = NodeSettings(cpu="100000", memory="100000Gi", max_pods=1_000_000)
    with EmbeddedCluster(ClusterSettings(nodes=args.nodes, node=nodes)) as cluster:
        kubeconfig = str(cluster.kubeconfig)
        async with (
            await KubeClient.connect(ClientSettings(qps=0, burst=0), kubeconfig=kubeconfig) as api,
            controller(kubeconfig, PlacementAuthSettings(users="admin")) as cached,
            controller(kubeconfig, PlacementAuthSettings(users="admin", cache_ttl_s=0)) as each,
            controller(kubeconfig, None) as without,
            aiohttp.ClientSession(headers=api.bearer_headers()) as http,
        ):
            arms = {"auth": cached, "uncached": each, "no auth": without}
            samples: dict[str, list[float]] = {name: [] for name in arms}
            for i in range(args.warmup + args.calls):
                for name, c in arms.items():
                    url = c.health_url
                    names = [f"{name.replace(' ', '-')}-{i}-{j}" for j in range(args.batch)]
                    body = {"namespace": "default", "names": names, "template": TEMPLATE}
                    started = time.perf_counter()
                    async with http.post(url + PLACEMENT_PATH, json=body) as resp:
                        await resp.read()
                        assert resp.status == 200, resp.status
                    if i >= args.warmup:
                        samples[name].append(time.perf_counter() - started)
            reviews = {n: c.placement.verifier.reviews for n, c in arms.items()
                       if c.placement is not None and c.placement.verifier is not None}  # fmt: skip
    print(f"{args.calls} calls per arm, interleaved, {args.batch} pods each, {args.nodes} nodes")
    for name, values in samples.items():
        print(f"  {name:8s} {summary(values)}")
    base = statistics.median(samples["no auth"])
    for name in ("auth", "uncached"):
        delta = statistics.median(samples[name]) - base
        print(f"  {name} adds {delta * 1e6:.0f} us per call (median), {reviews[name]} TokenReviews")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000, help="placement calls per arm")
    p.add_argument("--warmup", type=int, default=50, help="calls per arm not counted")
    p.add_argument("--batch", type=int, default=10, help="pods per call")
    p.add_argument("--nodes", type=int, default=20)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
