"""``load.burst --announce`` at CI scale: 60 sandboxes announced through the SDK on the ci
profile, the pool filled by the leading controller, then requested through the facade in
batches, in the production process topology.

Pods whose daemons answer claims are needed (the facade hands each claim to the pod's
daemon): simcluster's stand-in daemons (``nodes.virtual_daemon``, which the announce mode
turns on for a virtual runtime; held to the real daemon by
tests/integration/test_stand_in_conformance.py). What must hold exactly: every request
claimed from the pool (hits only), every sandbox Ready, one SandboxClaim per batch and
nothing else stored during the claim burst, nothing left after the release, and a report
with the announced figures; with 80% announced, the remainder created cold in the same
requests (partial or miss, never failed) and measured apart.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from load.burst.progress import say
from load.burst.report import write_csv, write_markdown
from load.burst.run import VIRTUAL_DAEMON, _announce_overrides, run_burst
from load.burst.settings import BurstSettings, Thresholds
from simcluster.profile import load_profile

N, BATCH = 60, 20


def test_announce_turns_virtual_daemons_on_where_pods_are_virtual(tmp_path: Path) -> None:
    process = BurstSettings(
        out=tmp_path, profile="ci", announce=True, overrides=("runtime=process",)
    )
    assert _announce_overrides(process) == ()
    assert _announce_overrides(BurstSettings(out=tmp_path, profile="ci")) == ()
    virtual = BurstSettings(out=tmp_path, profile="ci", announce=True)
    assert _announce_overrides(virtual) == (VIRTUAL_DAEMON,)
    key, value = VIRTUAL_DAEMON.split("=", 1)
    assert load_profile("ci", {key: value}).node.virtual_daemon


def _settings(tmp_path: Path, fraction: float) -> BurstSettings:
    return BurstSettings(
        out=tmp_path,
        sandboxes=N,
        window_s=1.0,
        batch=BATCH,
        profile="ci",
        baseline_sample=0,
        ready_timeout_s=60,
        release_timeout_s=30,
        fill_timeout_s=90,
        announce=True,
        announce_fraction=fraction,
        # A shared 2-core machine running real daemons: smoke-test latencies, not targets;
        # one claim per batch of 20 is 0.05 writes per sandbox (0.01 at the reference's 100).
        thresholds=Thresholds(
            max_claimed_p50_s=2.0,
            max_claimed_p99_s=5.0,
            max_after_last_request_s=5.0,
            max_claim_writes_per_sandbox=1 / BATCH,
        ),
    )


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.timeout(150)
async def test_an_announced_burst_is_claimed_from_the_pool(tmp_path: Path) -> None:
    result = await run_burst(_settings(tmp_path, 1.0), say)
    text = write_markdown(result, tmp_path / "report.md")
    write_csv(result.sandboxes, tmp_path / "sandboxes.csv")
    a = result.announce
    assert a is not None, text
    assert result.ready == N and result.ok, text
    assert a.claimed.count == N and a.cold.count == 0, text
    assert a.claims.get("hit") == N / BATCH and not a.claims.get("partial"), text
    assert not a.claims.get("miss") and not a.claims.get("failed"), text
    assert a.claims["claimed sandboxes"] == N
    # One SandboxClaim per batch is all that was stored from the first request to all Ready.
    stored = {k: v for k, v in a.claim_write_breakdown.items() if v and "review" not in k}
    assert stored == {"create sandboxclaims 201": N / BATCH}, text
    assert a.claim_writes_per_sandbox == pytest.approx(1 / BATCH)
    assert a.fill_s > 0 and a.fill_rate > 0 and a.status_filled_s >= a.fill_s - 1, text
    assert not math.isnan(a.claim_cpu_ms) and not math.isnan(a.fill_cpu_ms)
    assert result.left_after_release == 0
    # A claimed row is Ready once its create's answer held it: never before it was requested.
    with (tmp_path / "sandboxes.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == N and all(r["claimed"] == "1" for r in rows)
    assert all(float(r["ready"]) >= float(r["requested"]) for r in rows)
    assert "Announced pool: 60 of 60" in text and "requested → Ready, claimed" in text


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.timeout(150)
async def test_a_partial_pool_leaves_the_remainder_cold_in_the_same_requests(
    tmp_path: Path,
) -> None:
    result = await run_burst(_settings(tmp_path, 0.8), say)
    text = write_markdown(result, tmp_path / "report.md")
    a = result.announce
    assert a is not None, text
    assert result.ready == N and not result.given_up, text
    assert (a.announced, a.claimed.count, a.cold.count) == (48, 48, 12), text
    assert a.claims.get("partial", 0) + a.claims.get("miss", 0) >= 1, text
    assert not a.claims.get("failed"), text
    assert a.cold.p50 > 0 and not math.isnan(a.remainder_span_s), text
    assert result.left_after_release == 0, text
