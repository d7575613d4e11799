"""The capacity model follows pod/node events like the kubelet; the ledger reserves exactly."""

from __future__ import annotations

import pytest

from scheduler import ClusterModel, Resources
from tests.support.pods import node_json, pod_json

Mi = 2**20


def model_with_node() -> ClusterModel:
    model = ClusterModel()
    model.upsert_node(node_json("n1"))
    return model


def used(model: ClusterModel, node: str = "n1") -> tuple[int, int, int, int]:
    u = model.usage_of(node)
    return u.requested.cpu, u.requested.memory, u.pods, u.starting


def test_every_bound_pod_counts_whoever_scheduled_it() -> None:
    model = model_with_node()
    model.upsert_pod(pod_json("foreign", "1", "1Gi", node="n1", phase="Running"))
    model.upsert_pod(pod_json("ours", node="n1", phase="Pending"))
    assert used(model) == (1250, 1024 * Mi + 512 * Mi, 2, 1)


def test_unbound_pods_do_not_count() -> None:
    model = model_with_node()
    model.upsert_pod(pod_json("p"))
    assert used(model) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("phase", "deleting", "stopped", "counts"),
    [
        ("Running", False, False, True),
        ("Pending", False, False, True),
        ("Succeeded", False, False, False),
        ("Failed", False, False, False),
        ("Running", True, False, True),  # terminating: still holds its resources
        ("Running", True, True, False),  # all containers stopped: freed
        ("Unknown", False, False, True),
    ],
)
def test_lifecycle_like_the_kubelet(
    phase: str, deleting: bool, stopped: bool, counts: bool
) -> None:
    model = model_with_node()
    model.upsert_pod(pod_json("p", node="n1", phase=phase, deleting=deleting, stopped=stopped))
    assert (used(model)[2] == 1) is counts


def test_updates_move_the_contribution() -> None:
    model = model_with_node()
    model.upsert_node(node_json("n2"))
    model.upsert_pod(pod_json("p", node="n1", phase="Pending"))
    assert used(model) == (250, 512 * Mi, 1, 1)
    model.upsert_pod(pod_json("p", node="n1", phase="Running"))
    assert used(model) == (250, 512 * Mi, 1, 0)
    model.upsert_pod(pod_json("p", node="n1", phase="Succeeded"))
    assert used(model) == (0, 0, 0, 0)
    model.upsert_pod(pod_json("p", node="n2", phase="Running"))  # (not realistic, but exact)
    assert used(model, "n2") == (250, 512 * Mi, 1, 0)
    model.delete_pod(pod_json("p", node="n2"))
    assert used(model, "n2") == (0, 0, 0, 0)
    model.delete_pod("p")  # deleting twice is harmless
    assert model.held_pods() == 0


def with_generation(pod: dict, generation: int | None) -> dict:
    pod["metadata"]["generation"] = generation
    return pod


def test_requests_are_decoded_once_per_spec_generation() -> None:
    """Status updates of a bound pod reuse its requests; a resize (a new generation) and
    pods without a generation (API servers before 1.33) are decoded again."""
    model = model_with_node()
    model.upsert_pod(with_generation(pod_json("p", node="n1", phase="Pending"), 1))
    model.upsert_pod(with_generation(pod_json("p", "2", node="n1", phase="Running"), 1))
    assert used(model) == (250, 512 * Mi, 1, 0)  # same generation: same spec
    model.upsert_pod(with_generation(pod_json("p", "2", node="n1", phase="Running"), 2))
    assert used(model) == (2000, 512 * Mi, 1, 0)  # resized in place
    model.upsert_pod(with_generation(pod_json("p", "1", node="n1", phase="Running"), None))
    assert used(model) == (1000, 512 * Mi, 1, 0)
    model.delete_pod("p")
    model.upsert_pod(with_generation(pod_json("p", "3", node="n1", phase="Running"), 2))
    assert used(model) == (3000, 512 * Mi, 1, 0)  # deleted, then a new pod: forgotten


def test_watch_events_and_unknown_kind() -> None:
    model = ClusterModel()
    model.apply("Node", "ADDED", node_json("n1"))
    model.apply("Pod", "ADDED", pod_json("p", node="n1", phase="Running"))
    assert used(model)[2] == 1
    model.apply("Pod", "DELETED", pod_json("p", node="n1"))
    model.apply("Node", "DELETED", node_json("n1"))
    assert "n1" not in model.nodes
    with pytest.raises(ValueError, match="unsupported kind"):
        model.apply("Service", "ADDED", {})
    with pytest.raises(ValueError, match="unsupported event type"):
        model.apply("Pod", "BOOKMARK", {"metadata": {"resourceVersion": "5"}})


def test_pods_may_arrive_before_their_node() -> None:
    model = ClusterModel()
    model.upsert_pod(pod_json("p", node="late", phase="Running"))
    model.upsert_node(node_json("late"))
    assert used(model, "late")[2] == 1


def test_reserve_confirm() -> None:
    model = model_with_node()
    model.reserve("p", "n1", Resources(250, 512 * Mi), deadline=30.0)
    assert used(model) == (250, 512 * Mi, 1, 1)
    assert model.usage_of("n1").assumed == 1
    # The watch shows the binding: the real pod replaces the reservation, no double count.
    model.upsert_pod(pod_json("p", node="n1", phase="Pending"))
    assert used(model) == (250, 512 * Mi, 1, 1)
    assert model.usage_of("n1").assumed == 0
    assert len(model.ledger) == 0
    assert model.expire(100.0) == []


def test_unbound_update_of_an_assumed_pod_keeps_the_reservation() -> None:
    model = model_with_node()
    model.reserve("p", "n1", Resources(250, 512 * Mi), deadline=30.0)
    model.upsert_pod(pod_json("p"))  # e.g. a label update before the bind lands
    assert "p" in model.ledger
    assert used(model)[2] == 1


def test_forget_is_idempotent_and_exact() -> None:
    model = model_with_node()
    before = model.snapshot()
    model.reserve("p", "n1", Resources(250, 512 * Mi), deadline=30.0)
    assert model.forget("p") is True
    assert model.forget("p") is False
    assert model.snapshot() == before


def test_double_reservation_is_refused() -> None:
    model = model_with_node()
    model.reserve("p", "n1", Resources(1), deadline=1.0)
    with pytest.raises(ValueError, match="already placed or reserved"):
        model.reserve("p", "n1", Resources(1), deadline=1.0)
    model.upsert_pod(pod_json("q", node="n1", phase="Running"))
    with pytest.raises(ValueError, match="already placed or reserved"):
        model.reserve("q", "n1", Resources(1), deadline=1.0)
    with pytest.raises(ValueError, match="duplicate"):
        model.reserve_many(["a", "a"], "n1", Resources(1), deadline=1.0)


def test_expiry_uses_the_callers_clock() -> None:
    model = model_with_node()
    model.reserve_many(["a", "b"], "n1", Resources(100), deadline=10.0)
    model.reserve("c", "n1", Resources(100), deadline=20.0)
    model.forget("b")
    assert model.expire(9.99) == []
    assert model.expire(10.0) == ["a"]
    assert used(model)[2] == 1
    assert model.expire(25.0) == ["c"]
    assert used(model) == (0, 0, 0, 0)
    assert model.expire(1e9) == []


def test_deleting_an_assumed_pod_drops_the_reservation() -> None:
    model = model_with_node()
    model.reserve("p", "n1", Resources(100), deadline=10.0)
    model.delete_pod("p")
    assert used(model) == (0, 0, 0, 0)
    assert model.expire(11.0) == []


def test_prepared_images_are_normalised() -> None:
    model = model_with_node()
    model.set_prepared_images("n1", ["task:1"])
    assert "docker.io/library/task:1" in model.images_on(model.nodes["n1"])
    model.delete_node("n1")
    assert "n1" not in model.prepared


def test_ledger_expiry_heap_stays_bounded() -> None:
    model = model_with_node()
    for i in range(5000):
        model.reserve(f"p{i}", "n1", Resources(1), deadline=float(i))
        model.upsert_pod(pod_json(f"p{i}", "1m", None, node="n1", phase="Running"))
    assert len(model.ledger) == 0
    assert len(model.ledger._expiry) <= 1024 + 1
