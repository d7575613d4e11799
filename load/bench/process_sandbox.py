"""What the process runtime's allow-list sandbox costs: ``python -m load.bench.process_sandbox``.

Why measure: simcluster's process runtime (``sandman-dev up``, ``make demo``) used to bind
the host's whole filesystem into every sandbox; it now builds an allow-list root, passes its
flags and the environment through an ``--args`` file and runs the command as PID 1
(simcluster/kubelet/bwrap.py), and the devstack stages the daemon's Python once per stack
(devstack/sandbox_python.py). This times, on this machine: the staging; and, interleaved
in pairs, a container start to exit of the daemon's imports (``import
daemon.sandbox.server`` in the staged Python) under today's sandbox and under the former
whole-host root, reported as medians and the median of the paired ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from devstack.sandbox_python import SANDBOX_PREFIX, stage_daemon_python
from simcluster.kubelet.bwrap import SYSTEM_PATH, args_file, root_args

__all__ = ["main"]

_NAMESPACES = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
_IMPORT = ["-c", "import daemon.sandbox.server"]


def _former_root() -> list[str]:
    """The root the runtime built before the allow-list: every top-level host directory."""
    args: list[str] = []
    for entry in sorted(os.listdir("/")):
        path = f"/{entry}"
        if entry in ("proc", "dev", "tmp"):
            continue
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return [*args, "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]


def _now_start(stage: Path) -> float:
    flags = [*root_args(), *_NAMESPACES, "--as-pid-1", "--cap-drop", "ALL"]
    fd = args_file([*flags, "--ro-bind", str(stage), SANDBOX_PREFIX], {"PATH": SYSTEM_PATH})
    try:
        started = time.perf_counter()
        argv = ["bwrap", "--args", str(fd), "--", f"{SANDBOX_PREFIX}/bin/python3", *_IMPORT]
        subprocess.run(argv, pass_fds=(fd,), check=True, env={"PATH": SYSTEM_PATH})
        return time.perf_counter() - started
    finally:
        os.close(fd)


def _former_start(stage: Path) -> float:
    # The former root binds /opt read-only: the staged Python goes to a new top-level path.
    argv = ["bwrap", *_former_root(), *_NAMESPACES, "--ro-bind", str(stage), "/staged"]
    started = time.perf_counter()
    subprocess.run([*argv, "--", "/staged/bin/python3", *_IMPORT], check=True)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="pairs of container starts")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sandman-bench-") as tmp:
        stage = Path(tmp) / "python"
        staging = []
        for _ in range(5):
            started = time.perf_counter()
            stage_daemon_python(stage)
            staging.append(time.perf_counter() - started)
        print(f"staging the daemon's Python: {statistics.median(staging) * 1000:.0f} ms (5 runs)")
        now, former = [], []
        for i in range(args.runs):
            now.append(_now_start(stage))
            former.append(_former_start(stage))
            print(f"  pair {i + 1}/{args.runs}", end="\r", flush=True)
    ratio = statistics.median(a / b for a, b in zip(now, former, strict=True))
    print(f"container start to the daemon's imports, median of {args.runs}:")
    print(f"  allow-list sandbox {statistics.median(now) * 1000:.1f} ms")
    print(f"  former whole-host root {statistics.median(former) * 1000:.1f} ms")
    print(f"  paired ratio (allow-list / former) {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
