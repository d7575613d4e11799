"""The heap-based placement equals a naive oracle: one pod at a time, best node by full score.

The planner places whole runs, shares one heap between classes that differ only in their
image and re-keys entries lazily. None of that may change *where* pods go: for batches whose
start queues never fill, the result must equal the obvious O(pods x nodes) greedy.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import Scheduler, SchedulerSettings
from scheduler.fit import capacity_left, check_capacity, check_node
from scheduler.scores import image_locality, most_allocated
from scheduler.table import node_limit, tie_rank
from tests.support.pods import node_json, pod_json

IMAGES = ["registry.local/a:1", "registry.local/b:1", "registry.local/c:1"]


def oracle(s: Scheduler, batch: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """Greedy: for each pod in planner order, the feasible node with the best full score."""
    placed: Counter[tuple[str, str]] = Counter()
    pods = [s.decode_pod(obj) for obj in batch]
    for pod in pods:  # one class per image, same requests: planner order = first seen
        best, best_key = None, None
        for name, node in s.model.nodes.items():
            shape = pod.shape
            free = capacity_left(node_limit(node, s.settings), s.model.usage[name])
            if not (check_node(shape, node).ok and check_capacity(shape, free).ok):
                continue
            u, req = s.model.usage[name], shape.requests
            pack = most_allocated(node.allocatable, u.cpu + req.cpu, u.memory + req.memory)
            local = image_locality(shape, s.model.images_on(node))
            score = pack + local + 100.0  # no PreferNoSchedule taints here
            key = (-score, tie_rank(s.settings.seed, name))
            if best_key is None or key < best_key:
                best, best_key = name, key
        if best is not None:
            s.model.reserve(pod.uid, best, pod.shape.requests, deadline=1e9)
            placed[(best, pod.shape.images[0])] += 1
    return placed


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["1", "2", "3"]), st.lists(st.sampled_from(IMAGES), max_size=2)),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.tuples(st.sampled_from(IMAGES), st.integers(1, 9)), min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["100m", "700m"])), max_size=6),
)
def test_heap_placement_matches_the_greedy_oracle(
    nodes: list[tuple[str, list[str]]],
    classes: list[tuple[str, int]],
    foreign: list[tuple[int, str]],
) -> None:
    def build() -> Scheduler:
        s = Scheduler(SchedulerSettings(max_starting_per_node=None, seed=3))
        for i, (cpu, images) in enumerate(nodes):
            s.upsert_node(node_json(f"n{i}", cpu, "64Gi", "20", images=images[:1]))
            if images[1:]:
                s.set_prepared_images(f"n{i}", images[1:])
        for k, (i, cpu) in enumerate(foreign):
            node = f"n{i % len(nodes)}"
            s.upsert_pod(pod_json(f"f{k}", cpu, "1Gi", node=node, phase="Running"))
        return s

    batch = [
        pod_json(f"c{c}-{j}", "250m", "256Mi", image=image)
        for c, (image, count) in enumerate(classes)
        for j in range(count)
    ]
    s = build()
    plan = s.plan(batch, now=0.0)
    images = {obj["metadata"]["uid"]: obj["spec"]["containers"][0]["image"] for obj in batch}
    got = Counter((a.node, images[a.uid]) for a in plan.assignments)
    expected = oracle(build(), _class_order(batch))
    assert got == expected


def _class_order(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods regrouped the way the planner processes them: class by class, first seen first."""
    order: dict[str, int] = {}
    for obj in batch:
        order.setdefault(obj["spec"]["containers"][0]["image"], len(order))
    return sorted(batch, key=lambda obj: order[obj["spec"]["containers"][0]["image"]])
