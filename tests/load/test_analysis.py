# ruff: noqa: E501 - the metrics sample below is verbatim Prometheus text
"""The burst benchmark's arithmetic, on hand-computed cases: percentiles, stages, the lower
bound on paper-burst's numbers, efficiency, the QPS-50 model, API counters, pacing."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from load.burst import analysis as an
from load.burst.driver import schedule
from load.burst.images import ImageMixSettings, mode_lower_bound
from load.burst.settings import BurstSettings, profile_budget
from simcluster.apiserver.flowcontrol import Budget, _Bucket

METRICS = """\
# HELP apiserver_request_total API requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",resource="pods",subresource="",user="sa",verb="create"} 10.0
apiserver_request_total{code="429",resource="pods",subresource="",user="sa",verb="create"} 3.0
apiserver_request_total{code="201",resource="pods",subresource="binding",user="sa",verb="create"} 10.0
apiserver_request_total{code="200",resource="pods",subresource="",user="sa",verb="deletecollection"} 1.0
apiserver_request_total{code="200",resource="pods",subresource="",user="sa",verb="list"} 7.0
apiserver_request_total{code="200",resource="pods",subresource="status",user="node",verb="update"} 20.0
apiserver_flowcontrol_rejected_requests_total{flow_schema="sandman",priority_level="sandman"} 3.0
simcluster_kubelet_admission_rejections_total{reason="OutOfcpu"} 2.0
"""


def test_percentile_interpolates_between_ranks() -> None:
    assert an.percentile([1, 2, 3, 4], 50) == 2.5
    assert an.percentile([5.0], 99) == 5.0
    assert an.percentile(list(range(101)), 90) == 90
    assert math.isnan(an.percentile([], 50))


def test_stage_stats_skip_missing_and_clip_out_of_order() -> None:
    rows = [
        an.SandboxTimes("a", requested=0.0, created=0.5, bound=0.4, running=1.0, ready=1.5),
        an.SandboxTimes("b", requested=1.0, created=1.1, bound=1.3, running=2.3, ready=2.4),
        an.SandboxTimes("c", requested=2.0, created=2.1),  # never bound
    ]
    stats = {s.name: s for s in an.stage_stats(rows)}
    assert stats["requested → created"].count == 3
    assert stats["created → bound"].count == 2
    assert stats["created → bound"].p50 == pytest.approx(0.1)  # (0, 0.2): a's -0.1 counts 0
    assert stats["requested → ready"].max == pytest.approx(1.5)
    assert stats["bound → running"].p50 == pytest.approx(0.8)


def test_count_series_and_binds_per_second() -> None:
    assert an.count_series([0.0, 0.5, 1.0, None, 2.5], 1.0, 3.0) == [1, 3, 3, 4]
    assert an.binds_per_second([0.1, 0.2, 1.9, None, 3.0]) == [2, 1, 0, 1]
    assert an.binds_per_second([]) == []


def test_lower_bound_on_the_reference_burst() -> None:
    model = an.BudgetModel(
        sandboxes=11_858,
        mutating_qps=500,
        container_start_s=1.2,
        arrival_window_s=10,
        nodes=400,
        kubelet_creation_rate=4.5,
    )
    assert model.writes_needed == 23_716
    bound, which = an.lower_bound_s(model)
    assert which == "api"
    assert bound == pytest.approx(23_716 / 500 + 1.2)  # 48.63 s: no burst in the model
    full_bucket = dataclasses.replace(model, mutating_burst=500)
    bound, which = an.lower_bound_s(full_bucket)
    assert which == "api"
    assert bound == pytest.approx((23_716 - 500) / 500 + 1.2)  # 47.63 s
    assert an.efficiency(bound, 52.0) == pytest.approx(0.916, abs=1e-3)
    assert math.isnan(an.efficiency(bound, math.nan))
    one_write = dataclasses.replace(full_bucket, writes_per_sandbox=1)
    assert an.lower_bound_s(one_write)[0] == pytest.approx((11_858 - 500) / 500 + 1.2)


def test_lower_bound_is_a_bound_on_simclusters_token_bucket() -> None:
    """The fastest any client can get N writes through simcluster's bucket (rate r, full at
    the start with b tokens) is (N - b) / r: the bound must never exceed it."""
    rate, burst, writes = 500.0, 500.0, 1_300
    bucket = _Bucket(Budget(rate=rate, burst=burst))
    start = bucket.stamp
    waits = [bucket.wait_for_token() for _ in range(writes)]  # all at once: the best case
    last_admitted = max(waits) + (bucket.stamp - start)
    model = an.BudgetModel(writes, rate, 0.0, writes_per_sandbox=1, mutating_burst=burst)
    assert model.api_bound_s <= last_admitted + 1e-6
    assert model.api_bound_s == pytest.approx(last_admitted, abs=0.01)
    within_burst = an.BudgetModel(400, rate, 1.0, writes_per_sandbox=1, mutating_burst=burst)
    assert an.lower_bound_s(within_burst) == (pytest.approx(1.0), "api")


def test_the_profiles_budget_carries_its_burst(tmp_path: Path) -> None:
    budget = profile_budget(BurstSettings(out=tmp_path))
    assert (budget.mutating_qps, budget.mutating_burst) == (500, 500)


def test_lower_bound_kubelet_term_and_arrival_window() -> None:
    small = an.BudgetModel(500, 500, 1.2, arrival_window_s=2, nodes=20, kubelet_creation_rate=4.5)
    bound, which = an.lower_bound_s(small)
    assert which == "kubelet"
    assert bound == pytest.approx(25 / 4.5 + 1.2)
    unbudgeted = an.BudgetModel(100, math.inf, 0.5, arrival_window_s=3)
    assert an.lower_bound_s(unbudgeted) == (pytest.approx(3.5), "api")


def test_qps_model_and_sustained_rate() -> None:
    # kube-scheduler's default client: the first 100 binds free, then 50/s.
    assert an.qps_model_s(11_858, start_s=1.2) == pytest.approx(11_758 / 50 + 1.2)
    assert an.qps_model_s(50) == 0.0
    times = [i * 0.01 for i in range(100)] + [1.0 + i / 50 for i in range(100)]
    rate, head, k = an.sustained_rate(times)
    assert k == 100
    assert rate == pytest.approx(50, rel=0.02)
    assert head == pytest.approx(0.99)


def test_parse_metrics_counts_writes_per_user() -> None:
    c = an.parse_metrics(METRICS)
    assert c.writes("sa") == 21  # create 10 + bind 10 + deletecollection 1; 429s excluded
    assert c.writes("sa", ok_only=False) == 24
    assert c.writes("node") == 20
    assert c.rejected_429 == 3
    assert c.admission_rejections == 2
    assert c.code_count("429") == 3
    assert c.breakdown("sa")["create pods/binding 201"] == 10
    later = an.parse_metrics(METRICS.replace("} 10.0", "} 15.0"))
    assert later.minus(c).writes("sa") == 10


def test_schedule_spreads_requests_over_the_window() -> None:
    plan = schedule(250, 10.0, 100)
    assert [size for _, size in plan] == [100, 100, 50]
    assert [t for t, _ in plan] == pytest.approx([0, 10 / 3, 20 / 3])
    assert sum(size for _, size in schedule(11_858, 10.0, 1)) == 11_858


def test_longest_stall_after_a_fault() -> None:
    bound = [0.5, 1.0, 1.1, 4.6, 4.7, None, 5.0]
    assert an.longest_stall_s(bound, since=1.05, until=5.0) == pytest.approx(3.5)  # 1.1 → 4.6
    assert an.longest_stall_s(bound, since=4.9, until=5.0) == pytest.approx(0.1)
    assert an.longest_stall_s([], since=2.0, until=3.0) == pytest.approx(1.0)


def test_the_image_mix_bound_counts_the_pre_placed_single_write(tmp_path: Path) -> None:
    """The per-task-image stack pre-places (one write before Ready): its API bound is the
    one-write bound, not the create + bind one."""
    s = ImageMixSettings(out=tmp_path)  # 742 x 16 on paper-burst
    bound, which = mode_lower_bound(s, "announced", last_request_s=s.window_s)
    budget = profile_budget(BurstSettings(out=tmp_path, sandboxes=s.sandboxes))
    one_write = (s.sandboxes - budget.mutating_burst) / budget.mutating_qps
    start = budget.container_start_s
    assert which == "api" and bound == pytest.approx(max(one_write, s.window_s) + start)
    two_writes = (2 * s.sandboxes - budget.mutating_burst) / budget.mutating_qps + start
    assert bound < two_writes / 1.5
