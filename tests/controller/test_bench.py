"""The controller benchmarks run end to end (a smoke test: figures are not asserted, a
benchmark is not a timed unit test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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


def test_burst_bench_runs_and_prints_its_figures(tmp_path: Path) -> None:
    gc_stats = tmp_path / "gc.jsonl"
    argv = ["--pods", "100", "--nodes", "5", "--gc-stats", str(gc_stats)]
    out = subprocess.run(
        [sys.executable, "-m", "load.bench.controller_burst", *argv],
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
    # --gc-stats: the controller ran under load/bench/gc_probe.py, snapshots at both ends
    assert lines[8].startswith("cyclic GC in the window (")
    assert [ln.split(":")[0].strip() for ln in lines[9:12]] == ["gen0", "gen1", "gen2"]
    assert len(gc_stats.read_text().splitlines()) == 2


def test_placement_auth_bench_runs_and_the_cache_holds_reviews_to_one() -> None:
    argv = ["--calls", "20", "--warmup", "2", "--nodes", "2"]
    out = subprocess.run(
        [sys.executable, "-m", "load.bench.placement_auth", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = out.stdout.splitlines()
    assert lines[0].startswith("20 calls per arm, interleaved")
    assert [ln.split()[0] for ln in lines[1:4]] == ["auth", "uncached", "no"]
    assert lines[-2].endswith(", 1 TokenReviews")  # 22 calls, one review: the cache
    assert lines[-1].endswith(", 22 TokenReviews")  # one per call without it
