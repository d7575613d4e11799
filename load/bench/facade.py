"""Facade benchmark: ``python -m load.bench.facade`` (``make bench-facade``).

Two measurements, each on its own stack of real processes (devstack/stack.py):

1. **Tool-call overhead** (``dev`` profile, process-mode sandboxes running the real daemon):
   ``exec true`` through the facade and directly against the same daemon at its pod IP,
   interleaved in rounds so both see the same machine load. Reported: p50/p90 of each and
   the facade's overhead (difference of medians; issue target <= 2 ms p50).
2. **Creates** (``ci`` profile, virtual kubelets, no API budget in the way): ``--creates``
   single creates with 32 in flight, then the same number as batches of 500. Reported:
   creates per second and the facade process's CPU per create (psutil, user + system),
   i.e. what one facade replica costs per sandbox.

Progress goes to stderr, a Markdown table to stdout. Quote medians and ratios from one run:
the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import psutil

from daemon.sandbox.layout import DAEMON_PORT
from devstack.stack import Stack, StackSettings
from facade.config import load_config
from kube import PODS, KubeClient
from sandman.sdk.daemon_client import SandboxClient

__all__ = ["main"]

IMAGE = "registry.example/bench/task:1"


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _timed(n: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        out.append((time.perf_counter() - started) * 1000)
    return out


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def _exec_overhead(workdir: Path, rounds: int, per_round: int) -> list[str]:
    async with Stack(StackSettings(workdir=workdir / "exec"), progress=_say) as stack:
        headers = {"Authorization": f"Bearer {stack.token}"}
        async with aiohttp.ClientSession(stack.url, headers=headers) as http:
            async with http.post("/v1/sandboxes", json={"image": IMAGE, "owner": "bench"}) as r:
                sid = (await r.json())["id"]
            async with http.get(f"/v1/sandboxes/{sid}", params={"wait": "ready"}) as r:
                assert (await r.json())["state"] == "ready"
            async with await KubeClient.connect(kubeconfig=str(stack.kubeconfig)) as kube:
                pod = await kube.get(PODS, sid, "sandman-dev")
            config = load_config(workdir / "exec" / "facade.yaml")
            token = config.minter.token_of(pod)
            url = f"http://{pod['status']['podIP']}:{DAEMON_PORT}"
            via: list[float] = []
            direct: list[float] = []

            async def facade_exec() -> None:
                async with http.post(f"/v1/sandboxes/{sid}/exec", json={"argv": ["true"]}) as r:
                    await r.read()
                    assert r.status == 200

            async with SandboxClient(url, token) as daemon:
                for i in range(rounds):
                    direct += await _timed(per_round, lambda: daemon.exec(argv=["true"]))
                    via += await _timed(per_round, facade_exec)
                    _say(f"exec round {i + 1}/{rounds}")
            await http.delete(f"/v1/sandboxes/{sid}")
    overhead = statistics.median(via) - statistics.median(direct)
    return [
        "| exec `true` | p50 | p90 |",
        "|---|---|---|",
        f"| direct to the daemon (pod IP) | {statistics.median(direct):.2f} ms "
        f"| {_pct(direct, 0.9):.2f} ms |",
        f"| through the facade | {statistics.median(via):.2f} ms | {_pct(via, 0.9):.2f} ms |",
        f"| **facade overhead (p50 difference)** | **{overhead:.2f} ms** | |",
        f"| ratio facade / direct (p50) | {statistics.median(via) / statistics.median(direct):.2f}"
        " | |",
    ]


async def _creates(workdir: Path, n: int) -> list[str]:
    settings = StackSettings(
        workdir=workdir / "creates",
        profile="ci",
        nodes=max(4, n // 90),
        max_sandboxes=n + 10,
        create_rate_per_s=100_000,
        create_burst=n + 10,
    )
    rows = ["| create path | creates/s | facade CPU per create |", "|---|---|---|"]
    async with Stack(settings, progress=_say) as stack:
        pid = stack.processes["facade"].pid
        headers = {"Authorization": f"Bearer {stack.token}"}
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(stack.url, headers=headers, connector=connector) as http:
            for label, run in (
                ("single creates, 32 in flight", _singles),
                ("batches of 500", _batches),
            ):
                owner = f"bench-{label.split()[0]}"
                cpu, wall = _cpu(pid), time.perf_counter()
                await run(http, owner, n)
                cpu, wall = _cpu(pid) - cpu, time.perf_counter() - wall
                rows.append(f"| {label} | {n / wall:,.0f} | {cpu / n * 1000:.2f} ms |")
                _say(f"{label}: {n} in {wall:.1f} s")
                async with http.delete("/v1/sandboxes", params={"owner": owner}) as r:
                    assert r.status == 202
                await asyncio.sleep(2)  # let the deletions settle before the next path
    return rows


async def _singles(http: aiohttp.ClientSession, owner: str, n: int) -> None:
    limit = asyncio.Semaphore(32)

    async def one() -> None:
        async with limit, http.post("/v1/sandboxes", json={"image": IMAGE, "owner": owner}) as r:
            assert r.status == 201, await r.text()

    await asyncio.gather(*(one() for _ in range(n)))


async def _batches(http: aiohttp.ClientSession, owner: str, n: int) -> None:
    for first in range(0, n, 500):
        count = min(500, n - first)
        batch = {"spec": {"image": IMAGE, "owner": owner}, "count": count}
        async with http.post("/v1/batches", json=batch) as r:
            body = await r.json()
            assert r.status == 201 and not body["failed"], body


async def _run(args: argparse.Namespace) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="facade-bench-"))
    lines = [f"`python -m load.bench.facade --rounds {args.rounds} --creates {args.creates}`"]
    lines += ["", *await _exec_overhead(workdir, args.rounds, args.per_round), ""]
    lines += await _creates(workdir, args.creates)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench.facade", description=__doc__)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--per-round", type=int, default=100)
    p.add_argument("--creates", type=int, default=2000)
    sys.stdout.write(asyncio.run(_run(p.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
