"""The per-task-image burst (load/burst/images.py) at CI scale: the three modes on the ci
profile with a few images; every sandbox Ready, pulls counted where they happen (none during
a preloaded burst, nor during one announced ahead through the SDK's ``prepare``), the
preparation within its per-image pull bound, and a lower bound that includes pulls for the
unprepared mode. (The operator's path, an ImagePreparation created directly, is
tests/controller/test_image_preparer.py's.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from load.burst.images import ImageMixSettings, report, run_series

pytestmark = pytest.mark.anyio


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_ci_scale_image_series(tmp_path: Path) -> None:
    s = ImageMixSettings(
        out=tmp_path, images=6, per_image=4, window_s=1.0, profile="ci",
        overrides=("images.pull_base_s=1.0",), max_pulls_per_image=1,
        ready_timeout_s=60, prepare_timeout_s=60,
    )  # fmt: skip
    results = {r.mode: r for r in await run_series(s, lambda _m: None)}
    for r in results.values():
        assert r.ready == s.sandboxes, r
    assert results["preloaded"].pulls_per_image == 0
    assert set(results) == {"preloaded", "unprepared", "announced"}
    assert results["announced"].pulls_per_image == 0  # all pulled before the burst
    assert results["announced"].prepare_pulls >= s.images
    assert results["announced"].peak_pulls_of_one_image <= 1  # the bound held
    assert results["unprepared"].pulls_per_image >= 1
    assert results["unprepared"].lower_bound_s >= 1.0  # at least one cold pull
    assert "| announced |" in report(s, list(results.values()))
    assert (tmp_path / "report.md").exists()
