"""The burst benchmark at CI scale: 500 sandboxes within 2 s on 20 paper-burst nodes, in
the production process topology (simcluster, controller, facade as separate processes),
requested through the facade in batches as a trainer would.

Loose thresholds: this is a smoke test of the whole pipeline on a shared machine, not a
measurement (the full run is ``make bench-burst``; figures in BENCHMARKS.md). What must
hold exactly: every sandbox Ready, at most 3 API writes each, no kubelet rejections,
nothing left after release, and a report with a CSV row per sandbox and a plot.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from load.burst.progress import say
from load.burst.report import write_csv, write_markdown, write_plot
from load.burst.run import run_burst
from load.burst.settings import BurstSettings, Thresholds


def test_the_benchmark_tenant_is_never_throttled_by_the_facade(tmp_path: Path) -> None:
    from load.burst.run import TENANT, TOKEN, _stack_settings

    s = _stack_settings(BurstSettings(out=tmp_path, sandboxes=11_858))
    assert s.tenants == (TENANT,) and s.tenant_tokens == {TENANT: TOKEN}
    assert s.create_burst >= 11_858 and s.max_sandboxes >= 11_858
    assert "registry" in s.preloaded_images[0]  # the task image is on every node
    direct = _stack_settings(BurstSettings(out=tmp_path, sandboxes=10, direct=True))
    assert direct.facade_replicas == 0


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_ci_scale_burst(tmp_path: Path) -> None:
    settings = BurstSettings(
        out=tmp_path,
        sandboxes=500,
        window_s=2.0,
        nodes=20,
        baseline_sample=150,
        ready_timeout_s=45,
        release_timeout_s=20,
        thresholds=Thresholds(min_efficiency=0.2),
    )
    result = await run_burst(settings, say)
    text = write_markdown(result, tmp_path / "report.md")
    write_csv(result.sandboxes, tmp_path / "sandboxes.csv")
    write_plot(result, tmp_path / "timeline.png")

    assert result.ready == 500, text
    assert result.ok, text
    assert result.writes_per_sandbox <= 3.0
    assert result.admission_rejections == 0
    assert result.left_after_release == 0
    assert 0.2 <= result.efficiency <= 1.05, text
    assert result.baseline is not None and result.baseline.binds_per_s > 0
    assert not math.isnan(result.baseline.model_s)
    with (tmp_path / "sandboxes.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 500
    assert all(r["ready"] and r["bound"] and r["node"] for r in rows)
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
    assert "efficiency" in text and "requested → ready" in text
