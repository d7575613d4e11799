"""Benchmark of the simulated API server: ``python -m load.bench.simcluster``.

The server runs in its own process (``python -m simcluster up --profile ci --nodes 0``, so
it has a core of its own, as a real apiserver would); this process drives it over HTTPS on
loopback with an aiohttp client (the ~0.1 ms/request transport, see load/bench/controller.py):

- mutating: N pod creations (the request Sandman makes per sandbox) with C requests in
  flight; figure = requests/s;
- watch fan-out: W watchers on a namespace while M writes land in it; figure = watch events
  delivered per second, from the first write to the last event received (events are counted
  as lines, not decoded, so the client is not the bottleneck).

Each scenario runs ``--repeat`` times; the report gives every run and the median.

``--authorization always-allow|rbac`` measures what authorization costs a create: the server
runs in that mode, and the creations are made by a service account (not the exempt admin)
that a ClusterRole grants pods/namespaces create, among 100 unrelated bindings — run both
modes interleaved and compare CPU per creation (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import platform
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import yaml

__all__ = ["main"]


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    token: str
    ssl: ssl.SSLContext
    pid: int

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process has used so far."""
        t = psutil.Process(self.pid).cpu_times()
        return float(t.user + t.system)


@contextlib.asynccontextmanager
async def server_process(
    workdir: Path, tls: bool, profile: tuple[str, ...] = ("ci", "--nodes", "0")
) -> AsyncIterator[Target]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "simcluster", "up", "--profile", *profile,
        "--workdir", str(workdir), "--status-every", "3600",
        "--set", f"apiserver.tls={str(tls).lower()}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        while True:
            async with asyncio.timeout(60):
                line = (await proc.stdout.readline()).decode()
            if not line:
                raise RuntimeError("simcluster exited before it was ready")
            if "export KUBECONFIG" in line:
                break
        config = yaml.safe_load((workdir / "kubeconfig").read_text())
        cluster = config["clusters"][0]["cluster"]
        ctx = ssl.create_default_context()
        if tls:
            ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
            ctx = ssl.create_default_context(cadata=ca)
        yield Target(cluster["server"], config["users"][0]["user"]["token"], ctx, proc.pid)
    finally:
        proc.send_signal(2)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(20):
                await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"sandman.io/sandbox": "yes"}},
        "spec": {
            "schedulerName": "sandman",
            "containers": [
                {
                    "name": "c",
                    "image": "task:1",
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                }
            ],
        },
    }


async def _session(t: Target, limit: int) -> aiohttp.ClientSession:
    conn = aiohttp.TCPConnector(limit=limit, ssl=t.ssl)
    return aiohttp.ClientSession(
        t.url, connector=conn, headers={"Authorization": f"Bearer {t.token}"}
    )


async def _namespace(s: aiohttp.ClientSession, name: str) -> None:
    async with s.post("/api/v1/namespaces", json={"metadata": {"name": name}}) as r:
        assert r.status == 201, await r.text()


async def bench_mutating(t: Target, run: int, count: int, concurrency: int) -> tuple[float, float]:
    """(requests/s, server CPU ms per request)"""
    ns = f"mut-{run}"
    async with await _session(t, concurrency) as s:
        await _namespace(s, ns)
        queue = iter(range(count))
        errors = 0

        async def worker() -> None:
            nonlocal errors
            for i in queue:
                async with s.post(f"/api/v1/namespaces/{ns}/pods", json=_pod(f"p{i}")) as r:
                    await r.read()
                    errors += r.status != 201

        cpu0, start = t.cpu_s(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed, cpu = time.perf_counter() - start, t.cpu_s() - cpu0
    if errors:
        raise RuntimeError(f"{errors} creations failed")
    return count / elapsed, 1000 * cpu / count


_WRITER = {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["create"]}
_RBAC = "/apis/rbac.authorization.k8s.io/v1"


async def service_account_target(t: Target, noise: int = 100) -> Target:
    """A token of ``bench/writer``, bound to create pods and namespaces, among ``noise``
    unrelated RoleBindings (the index a shared cluster's authorizer searches)."""
    async with await _session(t, 4) as s:
        await _namespace(s, "bench")
        sa = {"metadata": {"name": "writer"}}
        async with s.post("/api/v1/namespaces/bench/serviceaccounts", json=sa) as r:
            assert r.status == 201, await r.text()
        role = {"metadata": {"name": "writer"}, "rules": [_WRITER]}
        async with s.post(f"{_RBAC}/clusterroles", json=role) as r:
            assert r.status == 201, await r.text()
        for i in range(noise + 1):
            subject = {"kind": "ServiceAccount", "name": "writer" if i == noise else f"sa{i}"}
            binding = {
                "metadata": {"name": f"b{i}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
                | {"name": "writer"},
                "subjects": [subject | {"namespace": "bench"}],
            }
            async with s.post(f"{_RBAC}/clusterrolebindings", json=binding) as r:
                assert r.status == 201, await r.text()
        token_url = "/api/v1/namespaces/bench/serviceaccounts/writer/token"
        async with s.post(token_url, json={"spec": {"audiences": []}}) as r:
            token = (await r.json())["status"]["token"]
    return Target(t.url, token, t.ssl, t.pid)


async def bench_watch(
    t: Target, run: int, watchers: int, writes: int, concurrency: int
) -> tuple[float, int]:
    ns = f"watch-{run}"
    expected = watchers * writes
    async with await _session(t, watchers + concurrency) as s:
        await _namespace(s, ns)
        async with s.get(f"/api/v1/namespaces/{ns}/pods") as r:
            rv = (await r.json())["metadata"]["resourceVersion"]
        received = 0
        last = 0.0
        done = asyncio.Event()

        async def watch() -> None:
            nonlocal received, last
            params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "120"}
            async with s.get(f"/api/v1/namespaces/{ns}/pods", params=params) as r:
                async for chunk in r.content.iter_any():
                    received += chunk.count(b"\n")
                    last = time.perf_counter()
                    if received >= expected:
                        done.set()
                        return

        tasks = [asyncio.create_task(watch()) for _ in range(watchers)]
        await asyncio.sleep(0.5)  # let every watch stream open
        queue = iter(range(writes))

        async def writer() -> None:
            for i in queue:
                async with s.post(f"/api/v1/namespaces/{ns}/pods", json=_pod(f"w{i}")) as r:
                    await r.read()

        start = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(concurrency)))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(60):
                await done.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return received / (last - start), received


async def bench_burst(t: Target, count: int, concurrency: int) -> dict[str, float]:
    """Create and bind ``count`` sandbox pods round-robin over the nodes (as a batch binder
    would, admin identity: no flow-control budget), then wait until all are Running."""
    async with await _session(t, concurrency) as s:
        await _namespace(s, "burst")
        async with s.get("/api/v1/nodes") as r:
            nodes = [n["metadata"]["name"] for n in (await r.json())["items"]]
        queue = iter(range(count))

        async def worker() -> None:
            for i in queue:
                async with s.post("/api/v1/namespaces/burst/pods", json=_pod(f"sb{i}")) as r:
                    await r.read()
                binding = {
                    "metadata": {"name": f"sb{i}"},
                    "target": {"kind": "Node", "name": nodes[i % len(nodes)]},
                }
                async with s.post(
                    f"/api/v1/namespaces/burst/pods/sb{i}/binding", json=binding
                ) as r:
                    await r.read()
                    if r.status != 201:
                        raise RuntimeError(f"binding sb{i}: {r.status}")

        cpu0, start = t.cpu_s(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        written = time.perf_counter() - start
        query = {"fieldSelector": "status.phase=Running", "limit": "1"}
        while True:
            async with s.get("/api/v1/namespaces/burst/pods", params=query) as r:
                page = await r.json()
            running = len(page["items"]) + page["metadata"].get("remainingItemCount", 0)
            print(f"  {time.perf_counter() - start:5.1f} s: {running}/{count} Running", flush=True)
            if running >= count:
                break
            await asyncio.sleep(1.0)
        return {
            "pods": count,
            "nodes": len(nodes),
            "create_and_bind_s": round(written, 2),
            "writes_per_s": round(2 * count / written),
            "all_running_s": round(time.perf_counter() - start, 2),
            "server_cpu_s": round(t.cpu_s() - cpu0, 1),
        }


async def _run_burst(args: argparse.Namespace) -> dict[str, Any]:
    profile = ("paper-burst", "--set", "nodes.preloaded_images=[task:1]")
    with tempfile.TemporaryDirectory(prefix="simcluster-bench-") as d:
        async with server_process(Path(d), not args.http, profile) as target:
            result = await bench_burst(target, args.burst, args.concurrency)
    print(
        f"{result['pods']} sandboxes on {result['nodes']} nodes: created and bound in "
        f"{result['create_and_bind_s']} s ({result['writes_per_s']:,} writes/s), all Running "
        f"after {result['all_running_s']} s; server CPU {result['server_cpu_s']} s"
    )
    return result


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "mutating_rps": [],
        "server_cpu_ms_per_write": [],
        "watch_events_per_s": [],
    }
    profile: tuple[str, ...] = ("ci", "--nodes", "0")
    if args.authorization:
        profile += ("--authorization", args.authorization)
        results["authorization"] = args.authorization
    with tempfile.TemporaryDirectory(prefix="simcluster-bench-") as d:
        async with server_process(Path(d), not args.http, profile) as target:
            if args.authorization:
                target = await service_account_target(target)
            for run in range(args.repeat):
                rps, cpu_ms = await bench_mutating(target, run, args.creates, args.concurrency)
                results["mutating_rps"].append(round(rps))
                results["server_cpu_ms_per_write"].append(round(cpu_ms, 3))
                print(
                    f"run {run + 1}: {rps:,.0f} pod creations/s "
                    f"({args.creates} at concurrency {args.concurrency}); "
                    f"server CPU {cpu_ms:.3f} ms per creation",
                    flush=True,
                )
            for run in range(0 if args.authorization else args.repeat):
                eps, n = await bench_watch(
                    target, run, args.watchers, args.writes, args.concurrency
                )
                results["watch_events_per_s"].append(round(eps))
                print(
                    f"run {run + 1}: {eps:,.0f} watch events/s delivered "
                    f"({n} events, {args.watchers} watchers x {args.writes} writes)",
                    flush=True,
                )
    results["median_mutating_rps"] = statistics.median(results["mutating_rps"])
    results["median_watch_events_per_s"] = (
        statistics.median(results["watch_events_per_s"]) if results["watch_events_per_s"] else 0
    )
    results["median_server_cpu_ms_per_write"] = statistics.median(
        results["server_cpu_ms_per_write"]
    )
    results["machine"] = (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m load.bench.simcluster", description=__doc__.split("\n")[0]
    )
    p.add_argument("--creates", type=int, default=5000, help="pod creations per mutating run")
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    p.add_argument("--watchers", type=int, default=100, help="watch streams in the fan-out run")
    p.add_argument("--writes", type=int, default=2000, help="writes during the fan-out run")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--http", action="store_true", help="plain HTTP instead of HTTPS (TLS cost excluded)"
    )
    p.add_argument(
        "--burst", type=int, default=0, metavar="N",
        help="instead: on paper-burst (400 nodes) create+bind N sandboxes, time to all Running",
    )  # fmt: skip
    p.add_argument(
        "--authorization", choices=("always-allow", "rbac"),
        help="instead: creations only, by a bound service account, with this authorization mode",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the results as JSON at the end")
    args = p.parse_args(argv)
    if args.burst:
        burst = asyncio.run(_run_burst(args))
        if args.json:
            print(json.dumps(burst))
        return 0
    results = asyncio.run(_run(args))
    mut, ev = results["median_mutating_rps"], results["median_watch_events_per_s"]
    cpu = results["median_server_cpu_ms_per_write"]
    watch = "" if args.authorization else f", {ev:,.0f} watch events/s"
    print(f"median: {mut:,.0f} mutating requests/s (server CPU {cpu:.3f} ms each){watch}")
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
