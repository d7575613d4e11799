"""Golden test: the unschedulable message, byte for byte as kube-scheduler renders it.

The expected messages live in golden/unschedulable_messages.txt (one "scenario: message" per
line). To regenerate after an intended change, run with SANDMAN_UPDATE_GOLDEN=1 and review
the diff; the test then skips instead of comparing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from scheduler import Scheduler, SchedulerSettings
from tests.support.pods import node_json, pod_json

GOLDEN = Path(__file__).parent / "golden" / "unschedulable_messages.txt"
TRAINING = [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]


def paper_cluster() -> Scheduler:
    """400 nodes: 312 without CPU to spare, 88 reserved for training by a taint."""
    s = Scheduler()
    for i in range(400):
        name = f"node-{i:03d}"
        s.upsert_node(node_json(name, taints=TRAINING if i % 50 < 11 else []))
        s.upsert_pod(pod_json(f"busy-{i}", "15900m", "1Gi", node=name, phase="Running"))
    return s


def mixed_cluster() -> Scheduler:
    s = Scheduler(SchedulerSettings(max_starting_per_node=None))
    pool = {"pool": "sandbox"}
    s.upsert_node(node_json("small", "200m", "256Mi", labels=pool))  # cpu and memory short
    s.upsert_node(node_json("full", pods="1", labels=pool))
    s.upsert_pod(pod_json("resident", "100m", "1Mi", node="full", phase="Running"))
    s.upsert_node(node_json("cordoned", unschedulable=True, labels=pool))
    s.upsert_node(node_json("down", conditions={"Ready": "Unknown"}, labels=pool))
    ready_but_full = {"Ready": "True", "DiskPressure": "True"}
    s.upsert_node(node_json("pressured", conditions=ready_but_full, labels=pool))
    s.upsert_node(node_json("elsewhere", labels={"pool": "batch"}))
    return s


def many_small_nodes() -> Scheduler:
    """10 full nodes and 9 tiny ones: Go's sort.Strings puts "10 Too..." before "9 Ins..."."""
    s = Scheduler()
    for i in range(10):
        s.upsert_node(node_json(f"n{i:02d}", pods="1"))
        s.upsert_pod(pod_json(f"resident{i}", "10m", "1Mi", node=f"n{i:02d}", phase="Running"))
    for i in range(10, 19):
        s.upsert_node(node_json(f"n{i:02d}", "100m"))
    return s


def first_message(s: Scheduler, **pod_kw: object) -> str:
    plan = s.plan([pod_json("probe", **pod_kw)], now=0.0)  # type: ignore[arg-type]
    assert not plan.assignments
    return plan.unschedulable[0].message


SCENARIOS: dict[str, Callable[[], str]] = {
    "paper-400": lambda: first_message(paper_cluster()),
    "mixed": lambda: first_message(mixed_cluster(), node_selector={"pool": "sandbox"}),
    "mixed-huge": lambda: first_message(mixed_cluster(), cpu="20", memory="100Gi"),
    "bytewise-sort": lambda: first_message(many_small_nodes()),
    "no-nodes": lambda: first_message(Scheduler()),
}


def render() -> str:
    return "".join(f"{name}: {build()}\n" for name, build in SCENARIOS.items())


def test_unschedulable_messages_match_the_golden_file() -> None:
    actual = render()
    if os.environ.get("SANDMAN_UPDATE_GOLDEN"):
        GOLDEN.write_text(actual)
        pytest.skip("golden file rewritten")
    assert actual == GOLDEN.read_text()
