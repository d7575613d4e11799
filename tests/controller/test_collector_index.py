"""The garbage collector's scan examines its candidates only, never every cached pod.

Issue 16 part 5: a scan that walked every cached pod every 5 s cost O(pods) per scan, over a
burst whose length also grows with its size; at 50,000 sandboxes it was the controller's
largest super-linear cost per bind. Here the view's informers are fed watch events directly
(``Informer.handle``, their no-I/O path) at two sizes: the pods a scan examines must not grow
with the healthy pods, and the verdicts (expired, pending-timeout, terminal after retention,
node-gone after grace) must be those of the end-to-end tests in test_collector.py, including pods
that change state between scans.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from controller.collector import GarbageCollector, GCSettings
from controller.view import ClusterView
from kube import KubeClient
from kube.contract import ANNOTATION_EXPIRES_AT
from scheduler import Scheduler
from tests.support.pods import node_json, pod_json

pytestmark = pytest.mark.anyio

WALL0 = 1_800_000_000.0  # the collector's wall clock at the start of each test
SETTINGS = GCSettings(terminal_retention_s=60, pending_deadline_s=600, node_gone_grace_s=30)


class Clocks:
    """The collector's monotonic and wall clocks, moved by the test."""

    def __init__(self) -> None:
        self.elapsed = 0.0

    def mono(self) -> float:
        return 1000.0 + self.elapsed

    def wall(self) -> float:
        return WALL0 + self.elapsed


def stamp(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sandbox(uid: str, *, node: str | None, phase: str, created: float, **annotations: str) -> Any:
    pod = pod_json(uid, node=node, phase=phase)
    pod["metadata"]["creationTimestamp"] = stamp(created)
    pod["metadata"]["annotations"] = annotations
    return pod


def view_of(client: KubeClient, clocks: Clocks, n: int) -> tuple[ClusterView, GarbageCollector]:
    """Four nodes; ``n`` running sandboxes on them and ``n`` fresh pending ones."""
    view = ClusterView(client, Scheduler())
    collector = GarbageCollector(client, view, SETTINGS, clock=clocks.mono, wall=clocks.wall)
    for i in range(4):
        view.nodes.handle("ADDED", node_json(f"node-{i}", pods="100000"))
    for i in range(n):
        running = sandbox(f"run-{i}", node=f"node-{i % 4}", phase="Running", created=WALL0 - 5)
        view.bound.handle("ADDED", running)
        pending = sandbox(f"wait-{i}", node=None, phase="Pending", created=WALL0 - 5)
        view.pending.handle("ADDED", pending)
    return view, collector


def verdicts(collector: GarbageCollector) -> dict[str, str]:
    return {pod["metadata"]["uid"]: reason for pod, reason in collector.candidates()}


@pytest.mark.parametrize("n", [40, 800])
async def test_a_scan_examines_candidates_not_every_pod(client: KubeClient, n: int) -> None:
    clocks = Clocks()
    view, collector = view_of(client, clocks, n)
    assert verdicts(collector) == {}
    assert collector.examined == 0  # 2n healthy sandboxes cost nothing
    # One of each: an expired one, one stuck pending, one that ended, and node-3's pods.
    view.bound.handle(
        "MODIFIED",
        sandbox(
            "run-0",
            node="node-0",
            phase="Running",
            created=WALL0 - 5,
            **{ANNOTATION_EXPIRES_AT: stamp(WALL0 + 10)},
        ),
    )
    view.pending.handle("ADDED", sandbox("stuck", node=None, phase="Pending", created=WALL0 - 590))
    view.bound.handle(
        "MODIFIED", sandbox("run-1", node="node-1", phase="Failed", created=WALL0 - 5)
    )
    view.nodes.handle("DELETED", node_json("node-3"))
    on_node_3 = {f"run-{i}" for i in range(3, n, 4)}
    assert verdicts(collector) == {}  # not yet: expiry, deadline, retention, grace
    assert collector.examined == 1 + len(on_node_3)  # the terminal one and node-3's
    clocks.elapsed = 15  # run-0 expired, stuck past its pending deadline
    assert verdicts(collector) == {"run-0": "expired", "stuck": "pending-timeout"}
    clocks.elapsed = 61  # past the retention and the grace
    expected = {"run-0": "expired", "stuck": "pending-timeout", "run-1": "terminal"}
    expected |= dict.fromkeys(on_node_3, "node-gone")
    assert verdicts(collector) == expected
    assert collector.examined == len(expected)  # independent of n but for node-3's share


async def test_a_pod_leaves_the_candidates_when_its_reason_does(client: KubeClient) -> None:
    clocks = Clocks()
    view, collector = view_of(client, clocks, 4)
    stuck = sandbox("late", node=None, phase="Pending", created=WALL0 - 700)
    view.pending.handle("ADDED", stuck)
    assert verdicts(collector) == {"late": "pending-timeout"}
    assert verdicts(collector) == {"late": "pending-timeout"}  # a failed delete: again
    view.pending.handle("DELETED", stuck)  # bound meanwhile: no longer pending
    view.bound.handle("ADDED", sandbox("late", node="node-0", phase="Pending", created=WALL0))
    assert verdicts(collector) == {}
    assert collector.examined == 0
    # An expiry moved later (renewed) is not due at the old time; a node back in time
    # ends the node-gone wait.
    renewed = {ANNOTATION_EXPIRES_AT: stamp(WALL0 + 5)}
    view.bound.handle(
        "MODIFIED", sandbox("run-2", node="node-2", phase="Running", created=WALL0, **renewed)
    )
    renewed = {ANNOTATION_EXPIRES_AT: stamp(WALL0 + 500)}
    view.bound.handle(
        "MODIFIED", sandbox("run-2", node="node-2", phase="Running", created=WALL0, **renewed)
    )
    view.nodes.handle("DELETED", node_json("node-1"))
    clocks.elapsed = 20
    assert verdicts(collector) == {}
    view.nodes.handle("ADDED", node_json("node-1"))
    clocks.elapsed = 55  # the grace would have run out at 50
    assert verdicts(collector) == {}
    clocks.elapsed = 501
    assert verdicts(collector) == {"run-2": "expired"}
    view.bound.handle("DELETED", sandbox("run-2", node="node-2", phase="Running", created=WALL0))
    assert verdicts(collector) == {}
    assert collector.examined == 0
