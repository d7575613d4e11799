"""The fault and soak benchmarks' arithmetic on hand-made cases: what counts as duplicated,
lost and typed (``load.faults.outcomes``), the churn plan and the RSS verdict
(``load.soak.analysis``)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from load.faults.outcomes import PodLife, TrainerOutcome, duplicated_pods, figures, is_typed
from load.shapes import ChurnShape
from load.soak.analysis import Sample, arrivals, rss_growth


def test_a_replacement_after_its_predecessor_is_not_a_duplicate() -> None:
    pods = [PodLife("a", "a", 0.0, 5.0), PodLife("a-r1", "a", 6.0)]
    assert duplicated_pods(pods, {"a"}) == []


def test_two_pods_of_one_sandbox_alive_together_are_one_duplicate() -> None:
    second = PodLife("a-x", "a", 2.0, 9.0)
    pods = [PodLife("a", "a", 0.0), second, PodLife("b", "b", 1.0)]
    assert duplicated_pods(pods, {"a", "b"}) == [second]


def test_a_pod_the_trainer_never_got_an_id_for_is_a_duplicate() -> None:
    orphan = PodLife("zzz", "zzz", 3.0, 4.0)
    assert duplicated_pods([PodLife("a", "a", 0.0), orphan], {"a"}) == [orphan]


def test_typed_reasons_exclude_the_empty_and_internal_ones() -> None:
    assert is_typed("node_lost") and is_typed("connection_failed")
    assert not is_typed("") and not is_typed("internal") and not is_typed(None)


def test_figures_count_each_outcome_and_the_detection_percentiles() -> None:
    rows = [
        TrainerOutcome("k/0", "a", requested=0.0, ready=2.0, outcome="ready"),
        TrainerOutcome("k/1", "b", requested=0.0, ready=4.0, outcome="ready"),
        TrainerOutcome("k/2", "c", requested=0.0, outcome="failed", reason="node_lost"),
        TrainerOutcome("k/3", "d", outcome="failed", reason="ValueError", typed=False),
        TrainerOutcome("k/4", "e", outcome="lost", reason="sandbox_not_found"),
        TrainerOutcome("k/5", "", outcome="pending"),
    ]
    f = figures(rows, [PodLife("x", "x", 1.0)], leaked=2, detections={"c": 0.5, "d": None})
    assert (f.requested, f.ready, f.lost, f.duplicated, f.leaked) == (6, 2, 2, 1, 2)
    assert (f.failed_typed, f.failed_untyped) == (1, 1)
    assert f.reasons == {"node_lost": 1} and f.untyped == {"ValueError": 1}
    assert (f.detected, f.affected, f.detect_max_s) == (1, 2, 0.5)
    assert (f.ready_p50_s, f.ready_max_s) == (2.0, 4.0)


def test_no_detections_is_nan_not_zero() -> None:
    f = figures([], [], leaked=0, detections={})
    assert math.isnan(f.detect_p50_s) and f.affected == 0


@settings(max_examples=50, deadline=None, derandomize=True)
@given(total=st.integers(1, 200_000), duration=st.integers(1, 3600), days=st.integers(1, 4))
def test_the_churn_plan_requests_exactly_the_total(total: int, duration: int, days: int) -> None:
    plan = arrivals(total, duration, ChurnShape(day_s=duration / days, days=days))
    assert sum(plan) == total and len(plan) == duration
    assert min(plan) >= 0


def test_the_churn_plan_peaks_at_mid_day() -> None:
    plan = arrivals(10_000, 100, ChurnShape(base=10, peak=50, day_s=100, days=1))
    assert plan.index(max(plan)) in range(45, 55)
    assert plan[0] < plan[50] / 3


def _samples(rss: list[int]) -> list[Sample]:
    return [Sample(float(t), 0, 0, {"facade": v}, 0.0, 0.0) for t, v in enumerate(rss)]


def test_rss_growth_is_judged_after_the_warm_up_on_medians() -> None:
    # grows 100 → 200 during the warm-up (first 10 s), then flat with one spike
    rss = [100 + 10 * t for t in range(10)] + [200] * 9 + [400] + [200] * 10
    assert rss_growth(_samples(rss), "facade", warmup_s=10) == 0.0
    leaking = [100 + t for t in range(40)]
    assert rss_growth(_samples(leaking), "facade", warmup_s=0) > 0.3
    assert math.isnan(rss_growth(_samples([1, 2]), "facade", warmup_s=0))
