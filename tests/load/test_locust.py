"""The locust load shapes (pure functions) and a smoke check that locust loads the
locustfile with its options and user classes (in a subprocess: locust monkey-patches the
standard library with gevent, which must not happen in the asyncio test process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from load.shapes import BurstShape, ChurnShape, StepShape, make_shape

ROOT = Path(__file__).resolve().parents[2]


def test_burst_shape_ramps_within_the_window_then_ends() -> None:
    s = BurstShape(users=100, ramp_s=10, hold_s=30)
    assert s.tick(0) == (100, 10.0)  # 100 users at 10/s: all started within 10 s
    assert s.tick(39.9) == (100, 10.0)
    assert s.tick(40) is None


def test_churn_shape_has_daily_peaks() -> None:
    s = ChurnShape(base=10, peak=50, day_s=60, days=2)
    assert s.users_at(0) == 10
    assert s.users_at(30) == 50  # noon
    assert s.users_at(60) == 10  # next midnight
    assert s.users_at(90) == 50
    assert 10 < s.users_at(15) < 50
    assert s.tick(119) is not None and s.tick(120) is None


def test_step_shape_climbs_then_holds_one_step() -> None:
    s = StepShape(step_users=10, step_s=5, max_users=30)
    ticks = [s.tick(t) for t in (0, 5, 10, 15)]
    assert ticks == [(10, 10.0), (20, 10.0), (30, 10.0), (30, 10.0)]
    assert s.tick(20) is None


def test_make_shape_by_name() -> None:
    assert isinstance(make_shape("burst", 50, 60), BurstShape)
    assert make_shape("steady-churn", 50, 90).tick(0) == (10, pytest.approx(4 * 40 / 30))
    assert isinstance(make_shape("step", 50, 60), StepShape)
    with pytest.raises(ValueError, match="unknown shape"):
        make_shape("spike", 1, 1)


@pytest.mark.timeout(60)
def test_locust_loads_the_locustfile() -> None:
    locust = Path(sys.executable).with_name("locust")
    out = subprocess.run(
        [str(locust), "-f", str(ROOT / "load" / "locustfile.py"), "--list"],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "RolloutUser" in out.stdout and "TrainerStepUser" in out.stdout
    # The Sandman options parse (an unknown option would be an error).
    opts = ["--shape", "burst", "--max-ready-p95-ms", "5000", "--tool-calls", "3", "--list"]
    parsed = subprocess.run(
        [str(locust), "-f", str(ROOT / "load" / "locustfile.py"), *opts],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=ROOT,
    )
    assert parsed.returncode == 0, parsed.stderr


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_locust_trainer_step_against_the_stack(tmp_path: Path) -> None:
    """Headless locust against the real stack (dev profile: every sandbox runs the daemon as
    a local process): one batch step per user with tool calls, CSV written, exit code 0; the
    same run with an impossible threshold exits 1."""
    import asyncio
    import csv
    import os

    from devstack.stack import Stack, StackSettings

    settings = StackSettings(workdir=tmp_path / "stack", profile="dev")
    settings.workdir.mkdir()
    locust = str(Path(sys.executable).with_name("locust"))

    async def run(csv_prefix: Path, *extra: str) -> int:
        proc = await asyncio.create_subprocess_exec(
            locust, "-f", str(ROOT / "load" / "locustfile.py"), "--headless",
            "--host", stack.url, "-u", "2", "-r", "2", "-t", "60s", "--steps", "1",
            "--batch", "2", "--think-time", "0.1", "--tool-calls", "3",
            "--csv", str(csv_prefix), "--only-summary", *extra, "TrainerStepUser",
            env={**os.environ, "SANDMAN_TOKEN": stack.token},
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, cwd=ROOT,
        )  # fmt: skip
        return await proc.wait()

    async with Stack(settings) as stack:
        assert await run(tmp_path / "ok") == 0
        assert await run(tmp_path / "strict", "--max-ready-p95-ms", "1") == 1

    with (tmp_path / "ok_stats.csv").open() as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    assert int(rows[("SANDBOX", "time-to-ready")]["Request Count"]) == 4
    assert int(rows[("POST", "/v1/sandboxes/[id]/exec")]["Request Count"]) >= 4
    assert int(rows[("POST", "/v1/batches")]["Failure Count"]) == 0
    assert all(int(r["Failure Count"]) == 0 for r in rows.values()), rows
