"""The benchmark command runs end to end (tiny sizes) and reports every phase."""

from __future__ import annotations

import pytest

from load.bench.scheduler import QUICK, main, run


def test_quick_bench_reports_all_phases(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    for phase in ("20 nodes:", "200 nodes:", "image per task:", "memory:", "events:"):
        assert phase in out
    assert out.count("[load.bench.scheduler]") >= 6  # a progress line per phase


def test_quick_bench_figures_are_consistent() -> None:
    results = {r["phase"]: r for r in run(QUICK)}
    small = results["20 nodes"]
    assert small["placed"] == QUICK.pods
    assert small["nodes_used_packing"] >= small["lower_bound_nodes"]
    assert small["nodes_used_burst"] >= small["lower_bound_nodes_burst"]
    assert results["200 nodes"]["max_per_node_burst"] <= 20  # capacity allows the cap
    assert small["max_per_node_burst"] >= 1
    images = results["20 nodes, image per task"]
    assert images["placed"] == QUICK.pods
    assert images["classes"] == -(-QUICK.pods // QUICK.pods_per_task)
    assert 0 < images["on_a_node_with_the_image"] <= QUICK.pods
    assert results["memory"]["pods"] == QUICK.memory_pods
    assert results["events"]["us_per_event_median"] > 0
