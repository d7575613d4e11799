"""The benchmark command runs end to end (tiny sizes) and reports every phase."""

from __future__ import annotations

import pytest

from scheduler.bench import QUICK, main, run


def test_quick_bench_reports_all_phases(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    for phase in ("20 nodes:", "200 nodes:", "memory:", "events:"):
        assert phase in out
    assert out.count("[scheduler.bench]") >= 6  # a progress line per phase


def test_quick_bench_figures_are_consistent() -> None:
    results = {r["phase"]: r for r in run(QUICK)}
    small = results["20 nodes"]
    assert small["placed"] == QUICK.pods
    assert small["nodes_used_packing"] >= small["lower_bound_nodes"]
    assert small["max_per_node_burst"] >= 1
    assert results["memory"]["pods"] == QUICK.memory_pods
    assert results["events"]["us_per_event_median"] > 0
