"""Daemon benchmark: ``make bench-daemon`` / ``python -m load.bench.daemon``.

Measures, in one run on one machine (so ratios are meaningful on a noisy shared host):

- exec of ``true`` through the daemon (HTTP round trip, spawn, reap) vs a bare local spawn of
  ``true`` from this process: p50/p99 of each, the overhead and the ratio;
- a command round trip in a persistent shell session;
- 1 MiB file write + read;
- daemon RSS when idle and after 1,000 execs;
- time from process start to the first healthy ``/healthz`` (the Python module, and the
  self-contained bundle inside a busybox rootfs under bubblewrap when ``--bundle`` is given).

Prints progress to stderr and a Markdown table to stdout (the rows BENCHMARKS.md records).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from daemon.sandbox.layout import bundle_command
from devstack.launcher import start_local_daemon
from devstack.rootfs import build_busybox_rootfs, free_port, start_in_rootfs
from sandman.sdk.daemon_client import SandboxClient

from .daemon_startup import measure_startup

__all__ = ["main"]


def _progress(message: str) -> None:
    print(f"[bench-daemon] {message}", file=sys.stderr, flush=True)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _timed(n: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _bare_spawn(n: int) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run(["true"], check=True)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _start_to_healthy_python(runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as workdir:
            daemon = start_local_daemon(workdir)
            daemon.stop()
            samples.append(daemon.startup_s * 1000)
    return samples


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process: CPU cost is steadier than latency on a shared machine."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


async def _measure(client: SandboxClient, pid: int, n: int) -> dict[str, list[float] | float]:
    out: dict[str, list[float] | float] = {}
    _progress("warming up")
    await _timed(50, lambda: client.exec(argv=["true"]))
    out["rss_idle"] = (await client.info()).usage.daemon_rss_bytes / 2**20
    _progress(f"exec true via daemon vs bare spawn, {n} each, interleaved in rounds")
    daemon_ms: list[float] = []
    bare_ms: list[float] = []
    daemon_cpu = bare_cpu = 0.0
    for _ in range(10):
        before = _cpu_seconds(pid)
        daemon_ms += await _timed(n // 10, lambda: client.exec(argv=["true"]))
        daemon_cpu += _cpu_seconds(pid) - before
        before = _own_cpu_seconds()
        bare_ms += _bare_spawn(n // 10)
        bare_cpu += _own_cpu_seconds() - before
    out["exec"], out["bare"] = daemon_ms, bare_ms
    out["daemon_cpu_ms"] = daemon_cpu * 1000 / len(daemon_ms)
    out["rss_after_execs"] = (await client.info()).usage.daemon_rss_bytes / 2**20
    out["bare_cpu_ms"] = bare_cpu * 1000 / len(bare_ms)
    _progress("session round trips")
    await client.create_session("bench")
    out["session"] = await _timed(200, lambda: client.run_in_session("bench", "true"))
    await client.close_session("bench")
    _progress("1 MiB write + read")
    payload = os.urandom(1 << 20)

    async def write_read() -> None:
        await client.write_file("bench.bin", payload)
        assert len(await client.read_file("bench.bin")) == len(payload)

    out["file"] = await _timed(100, write_read)
    out["rss_after"] = (await client.info()).usage.daemon_rss_bytes / 2**20
    return out


def _row(name: str, samples: list[float]) -> str:
    p50, p99 = statistics.median(samples), _pct(samples, 0.99)
    return f"| {name} | {p50:.2f} | {p99:.2f} | {len(samples)} |"


Results = dict[str, list[float] | float]


def _target_rows(label: str, results: Results) -> tuple[list[str], list[str]]:
    exec_ms, bare_ms = results["exec"], results["bare"]
    assert isinstance(exec_ms, list) and isinstance(bare_ms, list)
    rows = [
        _row(f"{label}: exec `true` (HTTP + spawn + reap)", exec_ms),
        _row(f"{label}: bare local spawn of `true`, same rounds", bare_ms),
    ]
    for key, what in (("session", "session command round trip"), ("file", "1 MiB write + read")):
        samples = results[key]
        assert isinstance(samples, list)
        rows.append(_row(f"{label}: {what}", samples))
    overhead = statistics.median(exec_ms) - statistics.median(bare_ms)
    ratio = statistics.median(exec_ms) / statistics.median(bare_ms)
    notes = [
        f"- {label}: exec overhead over a bare spawn **{overhead:.2f} ms p50** "
        f"(ratio {ratio:.2f}x); CPU per exec {results['daemon_cpu_ms']:.2f} ms in the daemon "
        f"vs {results['bare_cpu_ms']:.2f} ms for a bare spawn's parent",
        f"- {label}: RSS **{results['rss_idle']:.1f} MiB idle**, "
        f"**{results['rss_after_execs']:.1f} MiB after {len(exec_ms) + 50} execs**, "
        f"{results['rss_after']:.1f} MiB after 200 session commands and 100 MiB of file I/O",
    ]
    return rows, notes


def _report(targets: dict[str, Results], startup: dict[str, list[float]]) -> str:
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()} "
        f"({os.cpu_count()} CPUs, {platform.platform()}), Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f}",
        "",
        "| measurement | p50 ms | p99 ms | n |",
        "|---|---|---|---|",
    ]
    notes: list[str] = []
    for label, results in targets.items():
        rows, target_notes = _target_rows(label, results)
        lines += rows
        notes += target_notes
    for label, samples in startup.items():
        lines.append(_row(f"start to healthy: {label}", samples))
    return "\n".join([*lines, "", *notes])


async def _measure_bundle(bundle: Path, n: int) -> Results:
    """The same measurements against the bundle, PID 1 of a busybox rootfs under bwrap."""
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = build_busybox_rootfs(Path(tmp) / "rootfs")
        port, token = free_port(), os.urandom(16).hex()
        daemon = start_in_rootfs(
            rootfs,
            bundle,
            bundle_command(host="127.0.0.1", port=port),
            port=port,
            token=token,
            log_path=Path(tmp) / "log",
        )
        try:
            daemon.wait_healthy()
            pid = daemon.daemon_pid()
            assert pid is not None
            async with SandboxClient(daemon.base_url, token) as client:
                return await _measure(client, pid, n)
        finally:
            daemon.stop()


async def _run(n: int, bundle: str | None, startup_runs: int) -> str:
    targets: dict[str, Results] = {}
    with tempfile.TemporaryDirectory() as workdir:
        daemon = start_local_daemon(workdir)
        try:
            async with SandboxClient(daemon.url, daemon.token) as client:
                targets["venv daemon"] = await _measure(client, daemon.proc.pid, n)
        finally:
            daemon.stop()
    if bundle:
        _progress("the same against the bundle, PID 1 of a busybox rootfs")
        targets["bundle daemon"] = await _measure_bundle(Path(bundle).resolve(), n)
    _progress(f"start to healthy, python module, {startup_runs} runs")
    startup = {"python -m daemon.sandbox": _start_to_healthy_python(startup_runs)}
    notes: list[str] = []
    if bundle:
        _progress(
            f"start to healthy, bundle as PID 1 of a busybox rootfs (bwrap), {startup_runs} runs"
        )
        figures = measure_startup(Path(bundle).resolve(), startup_runs)
        startup["bundle as PID 1 in a busybox rootfs (bwrap)"] = [
            s * 1000 for s in figures.start_to_healthy_s
        ]
        notes += [
            f"- bundle start to healthy / venv daemon start to healthy (alternating samples): "
            f"**{figures.bundle_over_venv:.2f}**",
            f"- bundle: **{figures.bundle_bytes / 2**20:.1f} MiB** on disk, "
            f"idle RSS **{figures.idle_rss_bytes / 2**20:.1f} MiB**",
        ]
    return _report(targets, startup) + ("\n" + "\n".join(notes) if notes else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m load.bench.daemon", description=__doc__)
    parser.add_argument("--execs", type=int, default=1000)
    parser.add_argument("--startup-runs", type=int, default=10)
    parser.add_argument("--bundle", help="a built bundle directory (make bundle)")
    args = parser.parse_args(argv)
    print(asyncio.run(_run(args.execs, args.bundle, args.startup_runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
