"""Each fault of ``python -m load.faults`` at smoke scale (100 sandboxes on 10 paper-burst
nodes; the daemon fault: 6 real daemons), in the production process topology, through the
SDK: nothing lost, duplicated or leaked, every failure typed, the fault detected — and the
report, CSV and plot written. The soak at smoke scale too (checks but the RSS one, which
needs a long run). Figures at full scale: docs/benchmarks/faults-soak.md, "Faults" and
"Soak"."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from load.burst.progress import say
from load.faults.faults import FAULTS
from load.faults.report import checks, write_csv, write_markdown, write_plot
from load.faults.run import run_fault
from load.faults.settings import FaultSettings
from load.soak import report as soak_report
from load.soak.run import run_soak
from load.soak.settings import SoakSettings, SoakThresholds

pytestmark = pytest.mark.slow


def _small(out: Path, name: str) -> FaultSettings:
    return FaultSettings(
        out=out,
        faults=(name,),
        sandboxes=100,
        window_s=1.0,
        batch=25,
        workers=2,
        nodes=10,
        daemon_sandboxes=6,
        daemons_killed=2,
        dying_trainer_sandboxes=20,
        facade_pause_s=1.0,
        ready_timeout_s=60,
        cleanup_timeout_s=30,
    )


@pytest.mark.anyio
@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", list(FAULTS))
async def test_fault_at_smoke_scale(tmp_path: Path, name: str) -> None:
    s = _small(tmp_path, name)
    result = await run_fault(s, name, say)
    cks = checks([result], s.thresholds)
    text = write_markdown([result], cks, "pytest", tmp_path / "report.md")
    assert result.error == "", text
    f = result.figures
    assert (f.lost, f.duplicated, f.leaked, f.failed_untyped) == (0, 0, 0, 0), text
    assert all(c.ok for c in cks), text
    if f.affected:
        assert f.detected == f.affected, text
    write_csv([result], tmp_path / "sandboxes.csv")
    write_plot([result], tmp_path / "faults.png")
    with (tmp_path / "sandboxes.csv").open() as out:
        assert len(list(csv.DictReader(out))) == f.requested
    assert (tmp_path / "faults.png").stat().st_size > 5_000
    assert "**lost**" in text  # the definitions are in the report


def test_an_unknown_fault_is_refused_with_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from load.faults.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["no-such-fault"])
    assert exit_.value.code == 2
    assert "node-delete" in capsys.readouterr().err


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_soak_at_smoke_scale(tmp_path: Path) -> None:
    s = dataclasses.replace(
        SoakSettings(out=tmp_path),
        sandboxes=300,
        duration_s=10.0,
        days=1.0,
        nodes=10,
        hold_s=1.0,
        workers=2,
        tool_workers=1,
        process_nodes=1,
        sample_every_s=1.0,
        cleanup_timeout_s=30,
        thresholds=SoakThresholds(check_rss=False),
    )
    result = await run_soak(s, say)
    cks = soak_report.checks(result)
    text = soak_report.write_markdown(result, cks, tmp_path / "report.md")
    assert all(c.ok for c in cks), text
    assert result.figures.requested >= 300 and result.figures.ready == result.figures.requested
    assert result.tools.calls >= 4 and not result.tools.failed, text
    assert len(result.samples) >= 5 and result.peak_live > 0
    soak_report.write_csv(result, tmp_path / "samples.csv")
    soak_report.write_plot(result, tmp_path / "soak.png")
    assert (tmp_path / "soak.png").stat().st_size > 5_000
