"""What simcluster's stand-in daemons cost at the reference burst's scale:
``python -m load.bench.stand_in [--pods 11858] [--concurrency 256]``.

The ``virtual_daemon`` node setting gives every pool pod of a virtual node a listener on its
pod IP (simcluster/kubelet/stand_in.py). At 11,858 pods that is 11,858 listening sockets in
the simcluster process, so the figures that matter are: the memory and the time to open
them, the rate at which they take claims (the facade's ``POST /v1/claim``, one per claimed
pod, from an aiohttp client with ``--concurrency`` connections, as the facade sends them),
and the time to close them. The runtime is driven directly (``StandInRuntime.start``/
``stop``, as the kubelet calls it) on a loopback range reserved as a cluster reserves its
pod network, so nothing else on the machine is in the measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
from typing import Any

import aiohttp
import psutil

from simcluster.kubelet.runtime import Container, Probe, Sandbox
from simcluster.kubelet.stand_in import StandInRuntime, raise_open_file_limit
from simcluster.network import PodNetwork

__all__ = ["main"]

PORT, POOL_TOKEN = 8790, "bench-pool-token-0123456789"
HOSTS_PER_OCTET = 250  # host octets 1..250 of each 127.a.b.0/24


def _sandboxes(count: int, first: int) -> list[Sandbox]:
    env = {
        "SANDMAN_TOKEN_SHA256": hashlib.sha256(POOL_TOKEN.encode()).hexdigest(),
        "SANDMAN_POOLED": "1",
    }
    probe = Probe("/healthz", PORT)
    out = []
    for i in range(count):
        block, host = divmod(i, HOSTS_PER_OCTET)
        ip = f"127.{first + block // 256}.{block % 256}.{host + 1}"
        container = Container("sandbox", "bench", (), env, probe)
        out.append(Sandbox(f"uid-{i}", "bench", f"pool-{i}", ip, (container,)))
    return out


async def _claims(sandboxes: list[Sandbox], concurrency: int) -> tuple[float, int]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    gate = asyncio.Semaphore(concurrency)
    ok = 0

    async def claim(i: int, s: Sandbox) -> None:
        nonlocal ok
        body = {"claim": f"claim-{i // 100}", "token": f"sandbox-token-{i:012d}"}
        async with (
            gate,
            http.post(
                f"http://{s.ip}:{PORT}/v1/claim",
                json=body,
                headers={"Authorization": f"Bearer {POOL_TOKEN}"},
            ) as r,
        ):
            await r.read()
            ok += r.status == 204

    async with aiohttp.ClientSession(connector=connector) as http:
        started = time.monotonic()
        await asyncio.gather(*(claim(i, s) for i, s in enumerate(sandboxes)))
        return time.monotonic() - started, ok


async def run(args: argparse.Namespace) -> dict[str, Any]:
    raise_open_file_limit(args.pods + args.concurrency * 2 + 1024)
    network = PodNetwork(args.pods // HOSTS_PER_OCTET + 1)
    first = network.reserve()
    try:
        sandboxes = _sandboxes(args.pods, first)
        me = psutil.Process()
        rss0 = me.memory_info().rss
        runtime = StandInRuntime()
        started = time.monotonic()
        for s in sandboxes:
            await runtime.start(s)
        open_s = time.monotonic() - started
        rss = me.memory_info().rss - rss0
        claim_s, ok = await _claims(sandboxes, args.concurrency)
        started = time.monotonic()
        for s in sandboxes:
            await runtime.stop(s, 0)
        close_s = time.monotonic() - started
    finally:
        network.release()
    return {
        "pods": args.pods,
        "open_s": round(open_s, 2),
        "rss_mib": round(rss / 2**20, 1),
        "rss_kib_per_listener": round(rss / 1024 / args.pods, 1),
        "claims_ok": ok,
        "claims_s": round(claim_s, 2),
        "claims_per_s": round(args.pods / claim_s),
        "close_s": round(close_s, 2),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m load.bench.stand_in", description=__doc__)
    p.add_argument("--pods", type=int, default=11_858)
    p.add_argument("--concurrency", type=int, default=256)
    args = p.parse_args(argv)
    print(f"opening {args.pods} stand-in daemons, then one claim each", flush=True)
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
