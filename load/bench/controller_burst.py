"""Whole-process benchmark: ``python -m load.bench.controller_burst``.

``make bench-controller-burst`` runs it with its defaults.

A simcluster (virtual kubelets, unlimited API budget) runs on a thread of this process;
``--pods`` sandboxes are created pending first, then ``python -m controller`` starts as a
separate process and binds them. Reported, for the controller process alone (psutil):

- binds per second, from the first bind to the last (start-up and the initial lists are
  excluded: they are paid once per process, not per bind);
- CPU seconds (user + system) per 1,000 binds over that window (issue target <= 0.3 s),
  which includes the watch events the binds cause (bound pods, then their status updates);
- RSS at the end, holding every pod and node in its caches (target <= 250 MB at 12,000
  sandboxes and 400 nodes);
- API writes per sandbox by the controller, from simcluster's ``apiserver_request_total``;
- planning time per placement (the scheduler's share of that CPU: the controller's own
  ``sandman_plan_duration_seconds`` sum over the pods it planned, read from its ``/metrics``);
- RSS when the first bind is sent (the informers hold every pending pod and every node by
  then, so this less the RSS of a controller over an empty cluster is the informers' memory
  at that size; the growth between sizes is what the series is for).

Defaults are the issue's sizes; ``--pods 2000 --nodes 50`` is a quick run. Scale series
(issue 16): ``--pods 12000 --nodes 480``, ``--pods 25000 --nodes 1000``, ``--pods 50000
--nodes 2000`` (25 sandboxes per node each, so only the size changes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import sys
import time

import aiohttp
import psutil

from devstack.rootfs import free_port
from kube import PODS, ClientSettings, KubeClient
from simcluster.apiserver import ServerSettings
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster

__all__ = ["main"]

USER = "system:serviceaccount:sandman-system:controller"


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _pod(i: int) -> dict:
    return {
        "metadata": {"name": f"sb-{i}", "labels": {"app": "sandbox"}},
        "spec": {
            "schedulerName": "sandman",
            "containers": [
                {
                    "name": "task",
                    "image": "registry.local/task:1",
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                }
            ],
        },
    }


async def _create(client: KubeClient, n: int) -> None:
    sem = asyncio.Semaphore(64)
    done = 0

    async def one(i: int) -> None:
        nonlocal done
        async with sem:
            await client.create(PODS, _pod(i), "default")
        done += 1
        if done % 2000 == 0:
            _say(f"created {done}/{n}")

    await asyncio.gather(*(one(i) for i in range(n)))


def _writes(cluster: EmbeddedCluster, binds_only: bool = False) -> float:
    """The controller's writes (or successful binds), from simcluster's own counters: cheap
    to read, unlike listing 12,000 pods from a server sharing this process."""
    assert cluster.server is not None
    total = 0.0
    for line in cluster.server.metrics.render().decode().splitlines():
        if not line.startswith("apiserver_request_total{") or f'user="{USER}"' not in line:
            continue
        if binds_only:
            if 'subresource="binding"' in line and 'code="201"' in line:
                total += float(line.rsplit(" ", 1)[1])
            continue
        verb = re.search(r'verb="(\w+)"', line)
        if verb and verb.group(1) in ("create", "update", "patch", "delete"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _write_breakdown(cluster: EmbeddedCluster) -> str:
    """The controller's writes by verb, resource/subresource and HTTP code."""
    assert cluster.server is not None
    parts = []
    for line in cluster.server.metrics.render().decode().splitlines():
        if not line.startswith("apiserver_request_total{") or f'user="{USER}"' not in line:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if labels["verb"] in ("create", "update", "patch", "delete"):
            what = labels["resource"] + (
                f"/{labels['subresource']}" if labels["subresource"] else ""
            )
            parts.append(f"{labels['verb']} {what} {labels['code']}: {line.rsplit(' ', 1)[1]}")
    return ", ".join(sorted(parts))


async def _planning(health_port: int) -> tuple[float, float]:
    """(seconds spent planning, pods planned) from the controller's own histograms."""
    url = f"http://127.0.0.1:{health_port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    sums = dict(re.findall(r"^(sandman_plan_\w+_sum) (\S+)$", text, re.MULTILINE))
    planned = float(sums["sandman_plan_batch_pods_sum"])
    return float(sums["sandman_plan_duration_seconds_sum"]), planned


async def _window_start(a: argparse.Namespace, pid: int) -> asyncio.subprocess.Process | None:
    """At the first bind: the GC probe's first snapshot; py-spy attached (sampling only the
    window, in its own process: its CPU is not the controller's)."""
    if a.gc_stats:
        os.kill(pid, signal.SIGUSR1)
    if not a.py_spy:
        return None
    spy = shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if spy is None:
        raise SystemExit("--py-spy: py-spy is not installed in this virtualenv")
    return await asyncio.create_subprocess_exec(
        spy, "record", "--pid", str(pid), "--rate", "50", "--nonblocking",
        "--format", "raw", "--output", a.py_spy,
        stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def _window_end(
    a: argparse.Namespace, pid: int, spy: asyncio.subprocess.Process | None
) -> None:
    if a.gc_stats:
        os.kill(pid, signal.SIGUSR1)
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its samples and exits
        await spy.wait()


def _gc_report(path: str, pods: int) -> str:
    """The cyclic GC's work between the probe's two snapshots (load/bench/gc_probe.py)."""
    with open(path, encoding="utf-8") as f:
        first, last = (json.loads(line) for line in f.read().splitlines()[-2:])
    lines = [f"cyclic GC in the window ({last['frozen']} objects frozen):"]
    for gen in range(3):
        n = last["collections"][gen] - first["collections"][gen]
        sec = last["seconds"][gen] - first["seconds"][gen]
        lines.append(
            f"  gen{gen}: {n} collections, {sec:.2f} s = {sec / pods * 1000:.3f} s per 1,000 binds"
        )
    return "\n".join(lines)


async def _run(a: argparse.Namespace) -> None:
    settings = ClusterSettings(
        server=ServerSettings(),
        nodes=a.nodes,
        foreign_fraction=0.3,
        service_account_kubeconfigs=(("controller", "sandman-system/controller"),),
    )
    _say(f"starting simcluster with {a.nodes} nodes")
    with EmbeddedCluster(settings) as cluster:
        assert cluster.cluster is not None
        admin = ClientSettings(qps=0, max_connections=64)
        async with await KubeClient.connect(admin, kubeconfig=str(cluster.kubeconfig)) as c:
            await _create(c, a.pods)
            _say("starting the controller process")
            profile: tuple[str, ...] = ("-m", "cProfile", "-o", a.profile) if a.profile else ()
            if a.gc_stats:
                profile = ("-m", "load.bench.gc_probe", a.gc_stats)
            health_port = free_port()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *profile,
                "-m",
                "controller",
                "--kubeconfig",
                str(cluster.cluster.kubeconfigs["controller"]),
                "--no-election",
                "--health-host",
                "127.0.0.1",
                "--health-port",
                str(health_port),
                "--client-qps",
                "0",
                "--progress-interval-s",
                "5",
                "--log-level",
                "WARNING",
                # A 50,000-pod burst on simcluster outlasts the 600 s default: its last pods
                # would be collected as stuck Pending and never counted bound.
                "--gc-pending-deadline-s",
                "3600",
            )
            ps = psutil.Process(proc.pid)
            try:
                while _writes(cluster, binds_only=True) == 0:  # noqa: ASYNC110 - start-up, lists
                    await asyncio.sleep(0.01)
                start_cpu = ps.cpu_times()
                start = time.perf_counter()
                rss_first_bind = ps.memory_info().rss
                spy = await _window_start(a, proc.pid)
                last = 0.0
                while (n := _writes(cluster, binds_only=True)) < a.pods:
                    await asyncio.sleep(0.05)
                    if time.perf_counter() - last > 2:
                        last = time.perf_counter()
                        _say(f"bound {n:.0f}/{a.pods}")
                wall = time.perf_counter() - start
                end_cpu = ps.cpu_times()
                await _window_end(a, proc.pid, spy)
                rss = ps.memory_info().rss
                plan_s, planned = await _planning(health_port)
            finally:
                proc.terminate()
                await proc.wait()
        cpu = (end_cpu.user - start_cpu.user) + (end_cpu.system - start_cpu.system)
        writes = _writes(cluster)
        breakdown = _write_breakdown(cluster)
    print(f"sandboxes {a.pods}, nodes {a.nodes} (30% used by other tenants)")
    print(f"first to last bind: {wall:.1f} s ({a.pods / wall:.0f} binds/s sustained)")
    print(
        f"controller CPU in that window: {cpu:.2f} s = {cpu / a.pods * 1000:.3f} s per 1,000 binds"
    )
    print(f"controller RSS at the end: {rss / 2**20:.0f} MiB")
    print(f"API writes by the controller: {writes:.0f} = {writes / a.pods:.2f} per sandbox")
    print(f"  ({breakdown})")
    per_placement_us = plan_s / planned * 1e6
    print(f"planning: {plan_s:.2f} s for {planned:.0f} pods = {per_placement_us:.1f} us each")
    print(f"controller RSS at the first bind: {rss_first_bind / 2**20:.0f} MiB")
    if a.gc_stats:
        print(_gc_report(a.gc_stats, a.pods))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench.controller_burst", description=__doc__)
    p.add_argument("--pods", type=int, default=12_000)
    p.add_argument("--nodes", type=int, default=400)
    p.add_argument("--profile", help="write a cProfile of the controller process here")
    p.add_argument(
        "--gc-stats",
        metavar="FILE",
        help="run the controller under load/bench/gc_probe.py (snapshots to FILE) and "
        "report the cyclic GC's collections and seconds in the bind window",
    )
    p.add_argument(
        "--py-spy",
        metavar="FILE",
        help="sample the controller with py-spy over the bind window (collapsed stacks)",
    )
    asyncio.run(_run(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
