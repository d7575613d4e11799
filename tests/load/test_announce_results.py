"""The announce mode's arithmetic (load/burst/announce_results.py, series.py) on hand-computed
cases and invariants: claimed and cold rows apart, the last Ready after the last request,
the fill's share of its level's budget, Sandman's CPU per sandbox, the claims' own writes,
the series' arms, medians and ratios; and how a create's answer joins the pool watch
(``Pool.adopt``: a claimed row is Ready at its answer, never before it)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from load.burst import analysis as an
from load.burst.announce import Fill, Pool, pool_controller_args
from load.burst.announce_results import (
    AnnounceResult,
    announce_checks,
    announce_markdown,
    budget_used,
    cpu_per_sandbox_ms,
    latency_stats,
    summarize,
)
from load.burst.recorder import PodRecorder
from load.burst.report import BurstResult
from load.burst.series import arms, medians, series_markdown, series_row
from load.burst.settings import BurstSettings, Thresholds, profile_budget

POOLS_USER = "system:serviceaccount:sandman-system:sandman-pools"


def _row(sid: str, requested: float, ready: float | None, claimed: bool = False) -> an.SandboxTimes:
    return an.SandboxTimes(
        sid, requested=requested, created=requested, ready=ready, claimed=claimed
    )


def _summary(rows: list[an.SandboxTimes], **kw: Any) -> AnnounceResult:
    args: dict[str, Any] = {
        "announced": sum(r.claimed for r in rows),
        "requested": len(rows),
        "burst_writes": 2.0,
        "burst_breakdown": {"create sandboxclaims 201": 2.0},
        "claims": {"hit": 2.0},
        "pool_ready": [1.0, 2.0],
        "pool_stored": [0.5, 1.5],
        "status_filled_s": 3.0,
        "pool_level": "sandman",
        "pool_level_qps": 500.0,
        "pool_level_burst": 500.0,
        "pool_writes": 2.0,
        "fill_429_by_level": {"sandman": 0.0, "workload-low": 3.0},
        "claim_cpu_s": {"controller": 0.1, "facade": 0.3, "simcluster": 5.0},
        "fill_cpu_s": {"controller": 0.2},
    }
    args.update(kw)
    return summarize(rows, **args)


def test_claimed_and_cold_rows_are_apart_and_the_remainder_spans_its_own_requests() -> None:
    rows = [
        _row("p0", 0.0, 0.02, claimed=True),
        _row("p1", 1.0, 1.04, claimed=True),
        _row("c0", 8.0, 10.0),
        _row("c1", 9.0, 10.5),
    ]
    a = _summary(rows, announced=2, pool_ready=[1.0, 2.0], pool_stored=[0.5, 1.5])
    assert (a.claimed.count, a.cold.count, a.every.count) == (2, 2, 4)
    assert a.claimed.p50 == pytest.approx(0.03) and a.claimed.max == pytest.approx(0.04)
    assert a.cold.p50 == pytest.approx(1.75)
    assert a.after_last_request_s == pytest.approx(10.5 - 9.0)
    assert a.remainder_span_s == pytest.approx(10.5 - 8.0)
    assert a.fill_s == 2.0 and a.fill_rate == 1.0
    # 2 pool writes of (500 burst + 500/s x 1.5 s to the last pod stored)
    assert a.budget_used == pytest.approx(2 / 1250)
    assert a.fill_429_by_level == {"workload-low": 3.0}  # levels without 429s left out
    assert a.claim_cpu_ms == pytest.approx(1000 * 0.4 / 4)  # simcluster is not Sandman's
    assert a.fill_cpu_ms == pytest.approx(100.0)


def test_a_row_not_ready_leaves_the_all_ready_figures_unknown() -> None:
    rows = [_row("p0", 0.0, 0.02, claimed=True), _row("c0", 1.0, None)]
    a = _summary(rows, announced=1)
    assert math.isnan(a.after_last_request_s) and math.isnan(a.remainder_span_s)
    assert math.isnan(_summary(rows, announced=3).fill_s)  # fewer pool pods Ready than announced


def test_checks_hold_the_targets_and_the_claims_writes_leave_the_cold_creates_out() -> None:
    claimed = [_row(f"p{i}", i / 100, i / 100 + 0.01, claimed=True) for i in range(100)]
    full = _summary(claimed, announced=100, burst_writes=1.0, pool_writes=1300.0,
                    pool_stored=[1.0] * 100, pool_ready=[2.0] * 100)  # fmt: skip
    checks = {c.name: c for c in announce_checks(Thresholds(), full)}
    assert all(c.ok for c in checks.values()), checks
    assert checks["API writes per sandbox during the claim burst"].value == "0.0100"
    # 80 claimed + 20 cold, 1 claim + 20 creates: the claims cost 1/80 each, not 21/100.
    partial = claimed[:80] + [_row(f"c{i}", 0.8 + i / 100, 2.0) for i in range(20)]
    a = _summary(partial, announced=80, burst_writes=21.0)
    by_name = {c.name: c for c in announce_checks(Thresholds(), a)}
    writes = by_name["API writes per claimed sandbox during the burst (cold ones: 1 each)"]
    assert writes.value == f"{1 / 80:.4f}" and not writes.ok
    assert by_name["sandboxes claimed from the pool"].ok
    slow = _summary([_row("p", 0.0, 0.3, claimed=True)], announced=1)
    failed = {c.name for c in announce_checks(Thresholds(), slow) if not c.ok}
    assert failed >= {"claimed requested → Ready p50", "claimed requested → Ready p99"}
    unbudgeted = _summary(claimed, announced=100, pool_level="", pool_level_qps=math.inf)
    assert math.isnan(unbudgeted.budget_used)
    assert not [c for c in announce_checks(Thresholds(), unbudgeted) if "budget" in c.name]
    text = "\n".join(announce_markdown(full))
    assert "Announced pool: 100 of 100" in text and "claims: claimed" not in text
    assert "requested → Ready, claimed" in text and "budget used by the fill | 0%" not in text


@given(
    st.lists(st.tuples(st.floats(0, 100), st.floats(0, 10)), min_size=1, max_size=50),
)
def test_latency_percentiles_are_ordered_and_never_negative(
    pairs: list[tuple[float, float]],
) -> None:
    rows = [_row(str(i), req, req + d) for i, (req, d) in enumerate(pairs)]
    s = latency_stats(rows)
    assert s.count == len(rows)
    assert 0 <= s.p50 <= s.p99 <= s.max + 1e-9


@given(
    writes=st.floats(0, 1e5),
    qps=st.floats(1, 1e4),
    burst=st.floats(0, 1e4),
    span=st.floats(0.01, 1e4),
)
def test_the_budget_used_falls_with_more_time_or_rate_and_is_nan_without_a_budget(
    writes: float, qps: float, burst: float, span: float
) -> None:
    used = budget_used(writes, qps, burst, span)
    assert used >= 0
    assert budget_used(writes, qps, burst, 2 * span) <= used
    assert budget_used(writes, 2 * qps, burst, span) <= used
    assert math.isnan(budget_used(writes, math.inf, burst, span))
    assert math.isnan(budget_used(writes, qps, burst, 0.0))


def test_cpu_per_sandbox_counts_every_replica_of_sandmans_processes_only() -> None:
    cpu = {"controller": 1.0, "controller-2": 0.5, "facade": 2.0, "facade-2": 0.5, "simcluster": 9}
    assert cpu_per_sandbox_ms(cpu, 1000) == pytest.approx(4.0)
    assert math.isnan(cpu_per_sandbox_ms(cpu, 0))


def _pod(name: str, ready: bool) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running" if ready else "Pending"}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    labels = {"sandman.io/sandbox": name, "sandman.io/pool": "prep"}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "n1"},
        "status": status,
    }


def test_an_answered_pool_pod_is_a_claimed_row_ready_at_its_answer_and_only_once() -> None:
    t = [100.0]
    pool_watch = PodRecorder(client=None, namespace="ns", label_selector="x", clock=lambda: t[0])  # type: ignore[arg-type]
    burst = PodRecorder(client=None, namespace="ns", label_selector="y", clock=lambda: t[0])  # type: ignore[arg-type]
    pool_watch.t0 = 100.0
    t[0] = 101.0
    pool_watch.observe("ADDED", _pod("pool-p0-0", ready=True))
    pool_watch.observe("ADDED", _pod("pool-p0-1", ready=False))
    counters = an.ApiCounters()
    pool = Pool(pool_watch, Fill(2, "prep", 1.0, counters, counters, {}))
    burst.t0 = 110.0  # the burst starts 10 s after the announcement
    for sid in ("pool-p0-0", "pool-p0-0", "pool-p0-1", "cold-1"):
        sb = burst.get(sid)
        sb.requested, sb.created = 0.5, 0.52
        pool.adopt(burst, sb)
    claimed = burst.sandboxes["pool-p0-0"]
    assert claimed.claimed and claimed.ready == 0.52 and claimed.node == "n1"
    assert pool.claimed == 1 and burst.counts["ready"] == 1  # adopted once
    # Not Ready (never handed out Ready) and not a pool pod: left to the owner watch.
    assert not burst.sandboxes["pool-p0-1"].claimed and burst.sandboxes["pool-p0-1"].ready is None
    assert not burst.sandboxes["cold-1"].claimed


def test_the_filler_is_sized_to_its_levels_budget(tmp_path: Path) -> None:
    s = BurstSettings(out=tmp_path, announce=True)
    budget = profile_budget(s)
    assert (budget.pool_level, budget.pool_qps, budget.pool_user) == ("sandman", 500.0, POOLS_USER)
    args = dict(zip(*[iter(pool_controller_args(s, budget.pool_qps))] * 2, strict=True))
    assert args["--pools-qps"] == "500" and args["--pools-burst"] == "500"
    # a decision may create twice what the bucket gives between decisions: never the cap
    assert int(args["--pools-batch"]) >= 500 * float(args["--pools-interval-s"])
    own = BurstSettings(out=tmp_path, announce=True, pool_qps=40)
    assert (
        dict(zip(*[iter(pool_controller_args(own, 500.0))] * 2, strict=True))["--pools-qps"] == "40"
    )
    assert pool_controller_args(BurstSettings(out=tmp_path), 500.0) == ()
    assert math.isinf(profile_budget(BurstSettings(out=tmp_path, profile="ci")).pool_qps)


@pytest.mark.parametrize(
    "bad",
    [
        {"direct": True},
        {"creation": "binder"},
        {"announce_fraction": 0.0},
        {"announce_fraction": 1.5},
    ],
)
def test_announce_refuses_what_it_cannot_measure(tmp_path: Path, bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="announce"):
        BurstSettings(out=tmp_path, announce=True, **bad)


def test_the_series_rotates_its_arms_and_sizes_the_remainder_at_the_same_rate(
    tmp_path: Path,
) -> None:
    s = BurstSettings(out=tmp_path, sandboxes=1000, window_s=10, announce_fraction=0.8)
    first = arms(s, 0)
    assert [a for a, _ in first] == ["cold", "announced", "remainder"]
    assert [a for a, _ in arms(s, 1)] == ["announced", "remainder", "cold"]
    by_arm = dict(first)
    assert not by_arm["cold"].announce and by_arm["announced"].announced == 800
    assert (by_arm["remainder"].sandboxes, by_arm["remainder"].window_s) == (
        200,
        pytest.approx(2.0),
    )
    assert not by_arm["remainder"].announce
    assert by_arm["cold"].out == tmp_path / "round-01-cold"
    assert [a for a, _ in arms(BurstSettings(out=tmp_path, sandboxes=10), 0)] == [
        "cold",
        "announced",
    ]


def _result(rows: list[an.SandboxTimes], announce: AnnounceResult | None = None) -> BurstResult:
    ready = [r.ready for r in rows if r.ready is not None]
    return BurstResult(
        title="t", command="c", mode="m", sandboxes=rows, requested=len(rows),
        all_ready_s=max(ready), lower_bound_s=math.nan, bound_by="", efficiency=math.nan,
        stages=[], binds_per_s=[], writes_per_sandbox=1.0, write_breakdown={},
        throttled_server=0, throttled_client=0, given_up={}, admission_rejections=0,
        left_after_release=0, release_s=0.0, cpu_s={"facade": 1.0}, announce=announce,
        burst_writes_per_sandbox=0.01,
    )  # fmt: skip


def test_the_series_table_has_every_run_the_medians_and_the_ratios_within_it() -> None:
    cold = [_row(f"c{i}", i * 0.1, 30.0 + i * 0.1) for i in range(10)]
    claimed = [_row(f"p{i}", i * 0.1, i * 0.1 + 0.03, claimed=True) for i in range(10)]
    a = _summary(claimed, announced=10)
    rows = [
        series_row(0, "cold", _result(cold)),
        series_row(0, "announced", _result(claimed, a)),
        series_row(1, "cold", _result([_row(f"c{i}", i * 0.1, 40.0) for i in range(10)])),
        series_row(1, "announced", _result(claimed, a)),
    ]
    assert rows[0].p50_s == pytest.approx(30.0) and rows[1].p50_s == pytest.approx(0.03)
    assert rows[1].after_last_request_s == pytest.approx(0.03)
    assert math.isnan(rows[1].remainder_p50_s)  # no cold rows in a full pool
    med = medians(rows)
    assert med["cold"]["all_ready_s"] == pytest.approx((30.9 + 40.0) / 2)
    text = series_markdown("Series", "cmd", rows)
    assert text.count("| cold |") == 3 and "cold / announced (medians): all Ready" in text
    assert "remainder / a cold burst" not in text  # no remainder arm in this series
