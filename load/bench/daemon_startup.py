"""Start-up of the daemon bundle: ``python -m load.bench.daemon_startup --bundle DIR``.

Start to healthy, idle RSS and size of a built bundle (``make bundle``), started as PID 1 of
a busybox rootfs under bubblewrap the way a kubelet starts it, each sample paired with the
same daemon started from this interpreter (``python -m daemon.sandbox``) so both see the same
machine noise. ``make bench-daemon`` reports these figures too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from daemon.sandbox.bundle import dir_size
from daemon.sandbox.layout import ENTRY_MODULE, bundle_command
from devstack.rootfs import RootfsDaemon, build_busybox_rootfs, free_port, start_in_rootfs

__all__ = ["StartupFigures", "main", "measure_startup"]


@dataclass
class StartupFigures:
    """What `measure_startup` reports (seconds and bytes).

    `venv_*` is the same daemon started on the host from the build interpreter
    (`python -m daemon.sandbox`), sampled alternately with the bundle so both see the same
    machine noise: their ratio is the figure to quote, not either absolute time.
    """

    runs: int
    start_to_healthy_s: list[float]
    median_s: float
    p90_s: float
    max_s: float
    venv_median_s: float
    bundle_over_venv: float
    idle_rss_bytes: int
    bundle_bytes: int


def _rss_bytes(pid: int | None) -> int:
    if pid is None:
        return 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _bundle_sample(
    bundle: Path, rootfs: Path, log: Path, idle_s: float | None
) -> tuple[float, int]:
    """One start of the bundle in the rootfs: (seconds to healthy, idle RSS or 0)."""
    port = free_port()
    cmd = bundle_command(host="127.0.0.1", port=port)
    daemon = start_in_rootfs(rootfs, bundle, cmd, port=port, token="bench", log_path=log)
    try:
        elapsed = daemon.wait_healthy()
        if idle_s is None:
            return elapsed, 0
        time.sleep(idle_s)
        return elapsed, _rss_bytes(daemon.daemon_pid())
    finally:
        daemon.stop()


def _venv_sample(log: Path) -> float:
    """One start of the daemon from this interpreter on the host: seconds to healthy."""
    port = free_port()
    argv = [sys.executable, "-m", ENTRY_MODULE, "--host", "127.0.0.1"]
    env = {**os.environ, "SANDMAN_TOKEN": "bench"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compare against cached bytecode, as bundled
    with log.open("ab") as out:
        proc = subprocess.Popen([*argv, "--port", str(port)], env=env, stdout=out, stderr=out)
    daemon = RootfsDaemon(proc=proc, port=port, token="bench", log_path=log)
    try:
        return daemon.wait_healthy()
    finally:
        daemon.stop()


def measure_startup(
    bundle: Path,
    runs: int = 10,
    rootfs: Path | None = None,
    idle_s: float = 1.0,
    progress: Callable[[int, float, float], None] | None = None,
) -> StartupFigures:
    """Start the bundle `runs` times as PID 1 of a busybox rootfs under bubblewrap.

    Each sample is the time from spawning bwrap to the first 200 from /healthz (so it
    includes bwrap's ~4 ms). The idle RSS is the daemon's VmRSS `idle_s` after the last start.
    `progress(run, bundle_s, venv_s)` is called after each pair of samples.
    """
    with tempfile.TemporaryDirectory(prefix="sandman-bench-") as tmp:
        rootfs = rootfs or build_busybox_rootfs(Path(tmp) / "rootfs")
        log = Path(tmp) / "daemon.log"
        samples, venv, rss = [], [], 0
        for i in range(runs):
            elapsed, rss = _bundle_sample(bundle, rootfs, log, idle_s if i == runs - 1 else None)
            samples.append(elapsed)
            venv.append(_venv_sample(log))
            if progress is not None:
                progress(i + 1, samples[-1], venv[-1])
    median = statistics.median(samples)
    return StartupFigures(
        runs=runs,
        start_to_healthy_s=samples,
        median_s=median,
        p90_s=statistics.quantiles(samples, n=10, method="inclusive")[-1]
        if len(samples) > 1
        else samples[0],
        max_s=max(samples),
        venv_median_s=statistics.median(venv),
        bundle_over_venv=median / statistics.median(venv),
        idle_rss_bytes=rss,
        bundle_bytes=dir_size(bundle),
    )


def _print_progress(run: int, bundle_s: float, venv_s: float) -> None:
    print(f"run {run}: bundle {bundle_s * 1e3:.1f} ms, venv {venv_s * 1e3:.1f} ms", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    prog = "python -m load.bench.daemon_startup"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--bundle", type=Path, required=True, help="a built bundle (make bundle)")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    figures = measure_startup(args.bundle.resolve(), args.runs, progress=_print_progress)
    print(json.dumps(asdict(figures), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
