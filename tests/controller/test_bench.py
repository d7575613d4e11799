"""The controller benchmarks run end to end (a smoke test: figures are not asserted, a
benchmark is not a timed unit test)."""

from __future__ import annotations

import subprocess
import sys


def test_bench_runs_and_prints_its_table() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "load.bench.controller", "--requests", "60", "--pods", "120"],
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    )
    lines = out.stdout.splitlines()
    assert lines[0].split()[:2] == ["transport", "conc"]
    assert sum(1 for ln in lines if ln.startswith(("kr8s (httpx)", "KubeClient"))) == 4
    assert lines[-1].startswith("binds: ") and "per 1,000 binds (70 binds)" in lines[-1]
    assert "binds: binding 120 pods" in out.stderr


def test_burst_bench_runs_and_prints_its_figures() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "load.bench.controller_burst", "--pods", "100", "--nodes", "5"],
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    )
    lines = out.stdout.splitlines()
    assert lines[0] == "sandboxes 100, nodes 5 (30% used by other tenants)"
    assert "binds/s sustained" in lines[1]
    assert "per 1,000 binds" in lines[2] and "RSS" in lines[3]
    assert lines[4] == "API writes by the controller: 100 = 1.00 per sandbox"
    assert lines[6].startswith("planning: ") and lines[6].endswith(" us each")
    assert lines[7].startswith("controller RSS at the first bind: ")
