"""Placement that knows about pulls: images the node agent prepared, images already being
pulled for earlier pods, and per-node pull queues for a burst of unprepared images."""

from __future__ import annotations

from collections import defaultdict

import pytest

from scheduler import Scheduler, SchedulerSettings
from tests.support.pods import node_json, pod_json


def cluster(n: int, settings: SchedulerSettings | None = None) -> Scheduler:
    s = Scheduler(settings)
    for i in range(n):
        s.upsert_node(node_json(f"n{i}"))
    return s


def test_images_the_agent_prepared_attract_their_pods() -> None:
    s = cluster(8)
    s.set_prepared_images("n5", ["registry.local/task-7:1"])  # not in node.status.images
    plan = s.plan([pod_json("a", image="registry.local/task-7:1")], now=0.0)
    assert plan.by_node() == {"n5": 1}


def _images_per_node(s: Scheduler, plan_pods: list[dict[str, object]]) -> dict[str, set[str]]:
    image_of = {p["metadata"]["uid"]: p["spec"]["containers"][0]["image"] for p in plan_pods}  # type: ignore[index]
    plan = s.plan(plan_pods, now=0.0)
    out: dict[str, set[str]] = defaultdict(set)
    for a in plan.assignments:
        out[a.node].add(image_of[a.uid])
    return out


def test_unprepared_images_are_spread_so_no_node_queues_more_pulls_than_it_runs() -> None:
    """8 one-pod tasks, images present nowhere, 4 nodes: packing alone puts 5 images (the
    start-queue cap) on one node, whose 2 pull slots then serialise them; with pull queues
    counted, no node gets more than its 2 slots while another has fewer."""
    pods = [pod_json(f"p{i}", image=f"registry.local/task-{i}:1") for i in range(8)]
    packed = _images_per_node(cluster(4, SchedulerSettings(pull_slots_per_node=None)), pods)
    assert max(len(v) for v in packed.values()) == 5
    spread = _images_per_node(cluster(4), pods)
    assert sorted(len(v) for v in spread.values()) == [2, 2, 2, 2]


def test_a_later_batch_joins_the_pull_already_under_way() -> None:
    s = cluster(10)
    first = s.plan([pod_json("a", image="registry.local/big:1")], now=0.0)
    (node,) = first.by_node()
    later = s.plan([pod_json("b", image="registry.local/big:1")], now=1.0)
    assert later.by_node() == {node: 1}


def test_an_expected_pull_expires() -> None:
    s = cluster(10, SchedulerSettings(incoming_ttl_s=5.0))
    s.plan([pod_json("a", image="registry.local/big:1")], now=0.0)
    s.expire(10.0)
    assert s.model.incoming == {} and s.model.incoming_nodes == {}


@pytest.mark.parametrize("nodes", [10, 400])
def test_expiry_looks_at_the_due_pulls_only(nodes: int) -> None:
    """The binder expires every second: that must not cost a walk over every node's pulls
    (issue 16 part 5: O(nodes) a second, over a burst that lasts longer the bigger it is)."""
    s = cluster(nodes)
    big = "docker.io/library/big:1"
    for i in range(nodes):
        s.model.note_incoming(f"n{i}", big, until=100.0 + i)
    s.expire(50.0)
    assert s.model.incoming_examined == 0 and len(s.model.incoming) == nodes
    s.model.note_incoming("n1", big, until=1000.0)  # noted again: the later time counts
    s.expire(101.5)
    assert s.model.incoming_examined == 2
    assert "n0" not in s.model.incoming and s.model.incoming["n1"] == {big: 1000.0}
    assert len(s.model.incoming_nodes[big]) == nodes - 1
    s.delete_node("n2")
    s.expire(100.0 + nodes)
    assert s.model.incoming == {"n1": {big: 1000.0}} and s.model.incoming_nodes == {big: {"n1"}}
    s.expire(1000.0)
    assert s.model.incoming == {} and s.model.incoming_nodes == {}


def test_an_undone_dry_run_leaves_expiry_as_it_was() -> None:
    """A dry run (``plan(reserve=False)``) undoes its expected pulls with the model's
    incoming_state/restore_incoming: the expiry heap too, even if the run compacted it."""
    s = cluster(1, SchedulerSettings(incoming_ttl_s=5.0))
    big = "registry.local/big:1"
    s.plan([pod_json("a", image=big)], now=0.0)
    state = s.model.incoming_state()
    s.model.note_incoming("n0", big, until=6.0)  # what the dry run notes...
    for i in range(1500):  # ...enough to compact the heap
        s.model.note_incoming("n0", f"registry.local/dry-{i}:1", until=6.0)
    s.model.restore_incoming(state)
    assert s.model.incoming == {"n0": {big: 5.0}}
    s.expire(5.0)  # the pull noted before the dry run still expires on time
    assert s.model.incoming == {} and s.model.incoming_nodes == {}


def test_a_dry_run_leaves_no_expected_pulls() -> None:
    s = cluster(3)
    s.plan([pod_json("a", image="registry.local/big:1")], now=0.0, reserve=False)
    assert s.model.incoming == {}


def _pulls(settings: SchedulerSettings) -> int:
    """(image, node) pairs of a 4-task x 6-pod burst on 4 nodes: the pulls it causes."""
    s = cluster(4, settings)
    pods = [pod_json(f"t{t}-{i}", image=f"registry.local/task-{t}:1")
            for t in range(4) for i in range(6)]  # fmt: skip
    image_of = {p["metadata"]["uid"]: p["spec"]["containers"][0]["image"] for p in pods}  # type: ignore[index]
    plan = s.plan(pods, now=0.0)
    assert len(plan.assignments) == 24
    return len({(image_of[a.uid], a.node) for a in plan.assignments})


def test_beyond_the_start_caps_nodes_take_pods_of_the_images_they_pull_first() -> None:
    """Beyond every start cap, a node takes pods of the images it is already pulling before
    others, so one task's pods share fewer pulls than placement blind to pulls gives."""
    blind = _pulls(SchedulerSettings(max_starting_per_node=2, pull_slots_per_node=None,
                                     incoming_ttl_s=0))  # fmt: skip
    aware = _pulls(SchedulerSettings(max_starting_per_node=2))
    assert aware < blind


def test_pods_join_a_pull_under_way_beyond_the_start_cap() -> None:
    """A task's sandboxes arriving in later batches wait on the node already pulling their
    image (up to pull_join_cap starting there) rather than each starting a new ~20 s pull on
    another node because the first node's start queue is at the cap."""

    def later_batch(settings: SchedulerSettings) -> dict[str, int]:
        s = cluster(10, settings)
        first = s.plan([pod_json("a", image="registry.local/big:1")], now=0.0)
        (node,) = first.by_node()
        later = s.plan([pod_json(f"b{i}", image="registry.local/big:1") for i in range(12)], 1.0)
        return {"joined": later.by_node().get(node, 0), "nodes": len(later.by_node())}

    assert later_batch(SchedulerSettings()) == {"joined": 12, "nodes": 1}
    capped = later_batch(SchedulerSettings(pull_join_cap=None))
    assert capped["joined"] == 4 and capped["nodes"] > 1  # the start cap of 5, then elsewhere
