"""Scores in isolation (tables) and as the planner applies them (which node wins)."""

from __future__ import annotations

import pytest

from scheduler import (
    Headroom,
    NodeInfo,
    PodShape,
    Resources,
    Scheduler,
    SchedulerSettings,
    ScoreWeights,
    Taint,
    Toleration,
)
from scheduler.scores import (
    image_locality,
    most_allocated,
    prefer_no_schedule_count,
    taint_toleration,
)
from tests.support.pods import node_json, pod_json

ALLOC = Resources(16000, 64 * 2**30)


@pytest.mark.parametrize(
    ("cpu", "mem", "score"),
    [(0, 0, 0.0), (8000, 32 * 2**30, 50.0), (16000, 0, 50.0), (16000, 64 * 2**30, 100.0),
     (4000, 48 * 2**30, 50.0), (32000, 0, 50.0)],
)  # fmt: skip
def test_most_allocated(cpu: int, mem: int, score: float) -> None:
    assert most_allocated(ALLOC, cpu, mem) == pytest.approx(score)


def test_most_allocated_ignores_resources_the_node_lacks() -> None:
    assert most_allocated(Resources(1000, 0), 500, 10) == pytest.approx(50.0)
    assert most_allocated(Resources(), 5, 5) == 0.0


@pytest.mark.parametrize(
    ("images", "on_node", "score"),
    [((), {"a"}, 0.0), (("a",), {"a"}, 100.0), (("a",), set(), 0.0), (("a", "b"), {"b"}, 50.0)],
)
def test_image_locality(images: tuple[str, ...], on_node: set[str], score: float) -> None:
    assert image_locality(PodShape(Resources(), images=images), on_node) == score


SOFT = Taint("soft", "x", "PreferNoSchedule")


@pytest.mark.parametrize(
    ("taints", "tolerations", "count"),
    [
        ((), (), 0),
        ((SOFT,), (), 1),
        ((SOFT, Taint("other", "", "PreferNoSchedule")), (), 2),
        ((SOFT,), (Toleration("soft", "Exists"),), 0),
        ((Taint("hard", "", "NoSchedule"),), (), 0),
    ],
)
def test_prefer_no_schedule_count(
    taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...], count: int
) -> None:
    node = NodeInfo("n", ALLOC, 110, taints=taints)
    assert prefer_no_schedule_count(PodShape(Resources(), tolerations), node) == count


@pytest.mark.parametrize(
    ("count", "worst", "score"), [(0, 0, 100.0), (0, 2, 100.0), (1, 2, 50.0), (2, 2, 0.0)]
)
def test_taint_toleration_normalisation(count: int, worst: int, score: float) -> None:
    assert taint_toleration(count, worst) == score


def packing_scheduler(**kw: object) -> Scheduler:
    return Scheduler(SchedulerSettings(max_starting_per_node=None, **kw))  # type: ignore[arg-type]


def test_planner_packs_onto_the_fullest_node() -> None:
    s = packing_scheduler()
    for name in ("a", "b", "c"):
        s.upsert_node(node_json(name))
    s.upsert_pod(pod_json("foreign", "4", "8Gi", node="b", phase="Running"))
    plan = s.plan([pod_json("p1"), pod_json("p2")], now=0.0)
    assert {a.node for a in plan.assignments} == {"b"}


def test_image_locality_beats_a_small_packing_difference() -> None:
    s = packing_scheduler()
    s.upsert_node(node_json("a"))
    s.upsert_node(node_json("b", images=["registry.local/task:1"]))
    s.upsert_pod(pod_json("foreign", "1", "1Gi", node="a", phase="Running"))
    assert s.plan([pod_json("p")], now=0.0).assignments[0].node == "b"


def test_prepared_images_count_as_present() -> None:
    s = packing_scheduler()
    s.upsert_node(node_json("a"))
    s.upsert_node(node_json("b"))
    s.upsert_pod(pod_json("foreign", "1", "1Gi", node="a", phase="Running"))
    s.set_prepared_images("b", ["registry.local/task:1"])
    assert s.plan([pod_json("p")], now=0.0).assignments[0].node == "b"


def test_prefer_no_schedule_lowers_but_does_not_exclude() -> None:
    s = packing_scheduler()
    soft = [{"key": "soft", "value": "x", "effect": "PreferNoSchedule"}]
    s.upsert_node(node_json("a", taints=soft))
    s.upsert_node(node_json("b"))
    s.upsert_pod(pod_json("foreign", "1", "1Gi", node="a", phase="Running"))
    assert s.plan([pod_json("p")], now=0.0).assignments[0].node == "b"
    s2 = packing_scheduler()
    s2.upsert_node(node_json("a", taints=soft))
    assert s2.plan([pod_json("p")], now=0.0).assignments[0].node == "a"


@pytest.mark.parametrize(
    ("weights", "winner"),
    [
        (ScoreWeights(), "a"),
        (ScoreWeights(packing=0.0), "a"),
        (ScoreWeights(image_locality=0.0), "b"),
    ],
)
def test_weights_decide_between_locality_and_packing(weights: ScoreWeights, winner: str) -> None:
    s = packing_scheduler(weights=weights)
    s.upsert_node(node_json("a", images=["registry.local/task:1"]))
    s.upsert_node(node_json("b"))
    s.upsert_pod(pod_json("foreign", "10", "40Gi", node="b", phase="Running"))
    assert s.plan([pod_json("p")], now=0.0).assignments[0].node == winner


@pytest.mark.parametrize(
    ("headroom", "fits"),
    [
        (Headroom(), 8),  # 2 CPU / 250m
        (Headroom(absolute=Resources(cpu=1000)), 4),
        (Headroom(fraction=0.25), 6),  # keeps 500m
        (Headroom(pods=108), 2),
    ],
)
def test_headroom_is_kept_free(headroom: Headroom, fits: int) -> None:
    s = packing_scheduler(headroom=headroom)
    s.upsert_node(node_json("a", "2", "64Gi"))
    plan = s.plan([pod_json(f"p{i}") for i in range(10)], now=0.0)
    assert len(plan.assignments) == fits
    assert len(plan.unschedulable) == 10 - fits


def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="weights"):
        ScoreWeights(packing=-1)
    with pytest.raises(ValueError, match="fraction"):
        Headroom(fraction=1.0)
    with pytest.raises(ValueError, match="max_starting_per_node"):
        SchedulerSettings(max_starting_per_node=0)
    with pytest.raises(ValueError, match="assume_ttl_s"):
        SchedulerSettings(assume_ttl_s=0)
    with pytest.raises(ValueError, match="bind_timeout_s"):
        SchedulerSettings(bind_timeout_s=-1)
