"""The real runtime: ``python -m load.bench.cri [--sandboxes 20] [--pad-mib 64] [--json]``.

What preparation buys on a real node, and what a sandbox costs in a real container, measured
on a private containerd + registry (devstack.containerd) with busybox-static images built here
(devstack.ociimage):

- **CRI pull, prepared vs unprepared**: ``PullImage`` of an image that is absent (what a pod
  start without preparation waits for) vs the check a start does when the agent prepared it
  (``ImageStatus``, the kubelet's IfNotPresent), and ``PullImage`` of a present image (a
  registry round trip, no transfer). Each absent pull is a different image of ``--pad-mib``
  incompressible MiB, so nothing is cached.
- **container start → daemon healthy**: the cri runtime's RunPodSandbox + CreateContainer +
  StartContainer (the bundle mounted read-only), then until ``/healthz`` answers on the pod IP.
- **facade create → Ready** in the ``cri`` runtime: the SDK's ``create`` (which returns at
  Ready) through the whole stack (facade, controller, simcluster's cri profile), one sandbox
  at a time, image prepared.
- **what the hardening costs a tool call** (``--only hardening``): two daemons side by side,
  one in a container as the facade renders it (every capability dropped, no_new_privs,
  seccomp RuntimeDefault), one with the runtime's defaults; the same tool calls sent
  straight to each (no facade hop), interleaved round by round: ``exec true``, a shell that
  forks 100 processes (a test run's shape), a 64 KiB file written and read back. The
  seccomp filter runs on every system call, so the fork loop is where it would show.

The registry is on loopback, so "unprepared" here is a lower bound of a real pull: a
registry across a network adds its bandwidth (a 1 GiB image at 50 MiB/s is ~20 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from daemon.sandbox import bundle, layout
from devstack.containerd import ContainerdHost
from devstack.ociimage import ImageSpec, build_and_push
from devstack.stack import Stack, StackSettings
from sandman import AsyncSandman
from sandman.sdk.daemon_client import SandboxClient
from simcluster.kubelet.cri_runtime import CriRuntime, CriRuntimeSettings
from simcluster.kubelet.probes import probe_once
from simcluster.kubelet.runtime import Container, Mount, Probe, Sandbox, Security
from simcluster.network import PodNetwork

__all__ = ["main"]

SLEEP = ("/bin/busybox", "sleep", "2147483647")


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1e3, 1),
        "p90_ms": round(p90 * 1e3, 1),
        "max_ms": round(ordered[-1] * 1e3, 1),
    }


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def _timed(call: Any) -> float:
    start = time.perf_counter()
    await call
    return time.perf_counter() - start


async def bench_pulls(host: ContainerdHost, pad_mib: int, runs: int) -> dict[str, Any]:
    specs = [
        ImageSpec(f"bench/pad{i}", padding=pad_mib * 2**20, seed=i, cmd=SLEEP) for i in range(runs)
    ]
    pushed = [await asyncio.to_thread(build_and_push, host.registry, s) for s in specs]
    absent, present, status = [], [], []
    async with grpc.aio.insecure_channel(f"unix:{host.socket}") as channel:
        images = api_pb2_grpc.ImageServiceStub(channel)
        for image in pushed:
            spec = api_pb2.ImageSpec(image=image.reference)
            absent.append(await _timed(images.PullImage(api_pb2.PullImageRequest(image=spec))))
            present.append(await _timed(images.PullImage(api_pb2.PullImageRequest(image=spec))))
            status.append(await _timed(images.ImageStatus(api_pb2.ImageStatusRequest(image=spec))))
    _say(f"pulls: absent p50 {statistics.median(absent):.2f} s over {runs} images")
    return {
        "image_mib": round(pushed[0].size / 2**20, 1),
        "unprepared_pull": _summary(absent),
        "prepared_pull_of_present_image": _summary(present),
        "prepared_image_status": _summary(status),
    }


#: The hardened pod's container, as facade/podspec.py renders it (container_security and
#: the pod's seccomp profile), against the runtime's defaults.
HARDENED = Security(drop=("ALL",), no_new_privs=True, seccomp="RuntimeDefault")
DEFAULTS = Security()
TOKEN = "bench"


def _daemon_sandbox(
    i: int, image: str, bundle_dir: Path, octet: int, security: Security = DEFAULTS
) -> Sandbox:
    ip = f"127.{octet}.0.{2 + i % 250}"
    argv = tuple(layout.bundle_command(host=ip))
    mount = Mount("sandman", layout.BUNDLE_MOUNT, str(bundle_dir), read_only=True)
    probe = Probe("/healthz", layout.DAEMON_PORT)
    env = {"SANDMAN_TOKEN": TOKEN}
    container = Container("sandbox", image, argv, env, probe, (mount,), security=security)
    return Sandbox(f"bench-{i}-{uuid.uuid4().hex[:6]}", "bench", f"s{i}", ip, (container,))


async def bench_starts(
    host: ContainerdHost, image: str, bundle_dir: Path, runs: int, workdir: Path
) -> dict[str, Any]:
    runtime = CriRuntime(CriRuntimeSettings(str(host.socket), workdir / "logs"))
    network = PodNetwork(1)  # addresses no simulated cluster on this machine hands out
    octet = network.reserve()
    started, healthy = [], []
    try:
        for i in range(runs):
            sandbox = _daemon_sandbox(i, image, bundle_dir, octet)
            t0 = time.perf_counter()
            await runtime.start(sandbox)
            t1 = time.perf_counter()
            while not await probe_once(sandbox.ip, layout.DAEMON_PORT, "/healthz", 1.0):  # noqa: ASYNC110 - a poll is what is measured
                await asyncio.sleep(0.005)
            started.append(t1 - t0)
            healthy.append(time.perf_counter() - t1)
            await runtime.stop(sandbox, 1)
    finally:
        await runtime.close()
        network.release()
    _say(f"starts: start -> healthy p50 {statistics.median(healthy) * 1e3:.0f} ms")
    return {"cri_run_create_start": _summary(started), "start_to_daemon_healthy": _summary(healthy)}


async def bench_creates(
    host: ContainerdHost, image: str, bundle_dir: Path, runs: int, workdir: Path
) -> dict[str, Any]:
    settings = StackSettings(
        workdir=workdir / "stack",
        profile="cri",
        simcluster_overrides=(f"cri_socket={host.socket}",),
        delivery={"mode": "host-path", "host_path": str(bundle_dir)},
    )
    samples = []
    async with (
        Stack(settings, progress=_say) as stack,
        AsyncSandman(stack.url, stack.token, owner="bench-cri") as client,
    ):
        for _ in range(runs):
            t0 = time.perf_counter()
            sandbox = await client.create(image)
            samples.append(time.perf_counter() - t0)
            await sandbox.release()
    _say(f"creates: create -> Ready p50 {statistics.median(samples) * 1e3:.0f} ms")
    return {"facade_create_to_ready": _summary(samples)}


async def _tool_calls(daemon: SandboxClient, calls: int) -> dict[str, list[float]]:
    """One round of each tool call, ``calls`` times, on one daemon."""
    payload = bytes(range(256)) * 256  # 64 KiB
    forks = "i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done"

    async def write_read() -> None:
        await daemon.write_file("/tmp/bench.bin", payload)
        assert await daemon.read_file("/tmp/bench.bin") == payload

    kinds: dict[str, Any] = {
        "exec true": lambda: daemon.exec(argv=["/bin/true"]),
        "exec 100 forks": lambda: daemon.exec(command=forks),
        "64 KiB write+read": write_read,
    }
    return {k: [await _timed(call()) for _ in range(calls)] for k, call in kinds.items()}


async def bench_hardening(
    host: ContainerdHost, image: str, bundle_dir: Path, rounds: int, calls: int, workdir: Path
) -> dict[str, Any]:
    runtime = CriRuntime(CriRuntimeSettings(str(host.socket), workdir / "hardening-logs"))
    network = PodNetwork(1)
    octet = network.reserve()
    pods = {
        "hardened": _daemon_sandbox(0, image, bundle_dir, octet, HARDENED),
        "defaults": _daemon_sandbox(1, image, bundle_dir, octet, DEFAULTS),
    }
    medians: dict[str, dict[str, list[float]]] = {name: {} for name in pods}
    try:
        for sandbox in pods.values():
            await runtime.start(sandbox)
            while not await probe_once(sandbox.ip, layout.DAEMON_PORT, "/healthz", 1.0):  # noqa: ASYNC110 - waiting for the daemon
                await asyncio.sleep(0.01)
        for r in range(rounds):
            order = list(pods) if r % 2 == 0 else list(reversed(pods))  # A B, then B A
            for name in order:
                url = f"http://{pods[name].ip}:{layout.DAEMON_PORT}"
                async with SandboxClient(url, TOKEN) as daemon:
                    for kind, samples in (await _tool_calls(daemon, calls)).items():
                        medians[name].setdefault(kind, []).append(statistics.median(samples))
            _say(f"hardening: round {r + 1}/{rounds}")
    finally:
        for sandbox in pods.values():
            await runtime.stop(sandbox, 1)
        await runtime.close()
        network.release()
    report: dict[str, Any] = {}
    for kind in medians["hardened"]:
        hardened, defaults = medians["hardened"][kind], medians["defaults"][kind]
        ratios = sorted(h / d for h, d in zip(hardened, defaults, strict=True))
        report[kind] = {
            "hardened_p50_ms": round(statistics.median(hardened) * 1e3, 2),
            "defaults_p50_ms": round(statistics.median(defaults) * 1e3, 2),
            "ratio_median": round(statistics.median(ratios), 3),
            "ratio_range": [round(ratios[0], 3), round(ratios[-1], 3)],
        }
        _say(f"hardening: {kind}: x{report[kind]['ratio_median']} (per-round ratios)")
    return {"rounds": rounds, "calls_per_round": calls, "tool_calls": report}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-cri-") as tmp:
        workdir = Path(tmp)
        bundle_dir = args.bundle
        if not (bundle_dir / layout.EXECUTABLE).exists():
            _say(f"building the daemon bundle into {workdir / 'bundle'}")
            bundle_dir = workdir / "bundle"
            await asyncio.to_thread(bundle.build, bundle_dir, work=workdir / "bundle.work")
        async with ContainerdHost() as host:
            pause = ImageSpec(host.settings.pause_image.split(":")[0], cmd=SLEEP)
            await asyncio.to_thread(build_and_push, host.registry, pause)
            task = await asyncio.to_thread(
                build_and_push, host.registry, ImageSpec("bench/busybox", cmd=SLEEP)
            )
            report: dict[str, Any] = {"sandboxes": args.sandboxes}
            if args.only == "hardening":
                report["hardening"] = await bench_hardening(
                    host, task.reference, bundle_dir.resolve(), args.rounds, args.calls, workdir
                )
                return report
            report["pull"] = await bench_pulls(host, args.pad_mib, args.pull_runs)
            report["start"] = await bench_starts(
                host, task.reference, bundle_dir.resolve(), args.sandboxes, workdir
            )
            report["create"] = await bench_creates(
                host, task.reference, bundle_dir.resolve(), args.sandboxes, workdir
            )
            return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m load.bench.cri", description=__doc__)
    parser.add_argument("--sandboxes", type=int, default=20)
    parser.add_argument("--pull-runs", type=int, default=5)
    parser.add_argument("--pad-mib", type=int, default=64)
    parser.add_argument("--bundle", type=Path, default=Path("build/daemon-bundle"))
    parser.add_argument("--only", choices=["hardening"], help="run this part alone")
    parser.add_argument("--rounds", type=int, default=7, help="hardening: interleaved rounds")
    parser.add_argument("--calls", type=int, default=30, help="hardening: calls per kind")
    parser.add_argument("--json", action="store_true", help="one JSON document only")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
