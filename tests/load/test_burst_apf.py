"""``python -m load.burst --apf manifests``: the burst under the manifests' APF objects.

What must hold: with manifests/access/flowcontrol.yaml applied on ``paper-burst-apf``, the
controller's binds are dispatched in ``sandman-binds`` and the facade's creates in
``sandman-workload`` (simcluster's apiserver_flowcontrol_dispatched_requests_total), the
lower bound uses the budget those levels got, and a profile whose own schema would match
Sandman first is refused rather than measured as if the manifests applied.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from load.burst import apf
from load.burst.progress import say
from load.burst.report import write_markdown
from load.burst.run import run_burst
from load.burst.settings import BurstSettings, Thresholds, profile_budget


def test_the_controller_and_facade_levels_are_read_from_the_manifests() -> None:
    assert apf.sandman_levels() == {"sandman-binds", "sandman-election", "sandman-workload"}


@pytest.mark.anyio
async def test_a_profile_with_its_own_sandman_schema_is_refused(tmp_path: Path) -> None:
    budget = profile_budget(BurstSettings(out=tmp_path, profile="paper-burst"))
    with pytest.raises(RuntimeError, match="paper-burst-apf"):
        await apf.apply_flowcontrol(tmp_path / "no-kubeconfig", budget)


def test_the_apf_profile_gives_sandman_todays_budget(tmp_path: Path) -> None:
    """paper-burst-apf's server budget, split by shares, gives the controller's and the
    facade's levels paper-burst's 500 writes/s (125 of 305 shares)."""
    text = "\n".join(
        f'simcluster_flowcontrol_budget_requests_per_second{{priority_level="{lv}",'
        f'class="mutating"}} {1220 * shares / 305}'
        for lv, shares in (("sandman-binds", 60), ("sandman-election", 5),
                           ("sandman-workload", 60), ("sandman-agents", 10),
                           ("sandman-pools", 10))
    )  # fmt: skip
    budget = profile_budget(BurstSettings(out=tmp_path, profile="paper-burst-apf"))
    assert budget.mutating_qps == math.inf  # no profile schema for Sandman
    got = apf.shared_budget(budget, text, apf.sandman_levels())
    assert got.mutating_qps == pytest.approx(500, abs=0.01)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_binds_are_dispatched_in_their_own_level(tmp_path: Path) -> None:
    settings = BurstSettings(
        out=tmp_path,
        sandboxes=60,
        window_s=0.5,
        profile="paper-burst-apf",
        nodes=4,
        creation="binder",
        apf="manifests",
        baseline_sample=0,
        ready_timeout_s=30,
        release_timeout_s=15,
        thresholds=Thresholds(min_efficiency=0.0),
    )
    result = await run_burst(settings, say)
    text = write_markdown(result, tmp_path / "report.md")

    assert result.ready == 60, text
    levels = result.dispatched_by_level
    assert levels.get("sandman-binds", 0) >= 60, levels
    assert result.write_breakdown.get("create pods/binding 201") == 60, text
    assert levels.get("sandman-workload", 0) >= 1, levels
    assert levels.get("workload-low", 0) == 0, levels  # nothing of Sandman's left over
    assert result.lower_bound_s < math.inf
    assert "sandman-binds" in text and "the manifests' APF objects" in text
