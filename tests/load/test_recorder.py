"""The recorder stamps each transition once, when first seen, keyed by the sandbox label
(a replacement pod `<name>-r1` continues its sandbox's record)."""

from __future__ import annotations

from typing import Any

from load.burst.recorder import PodRecorder


def _pod(name: str, sid: str, node: str = "", phase: str = "Pending", ready: bool = False) -> Any:
    status: dict[str, Any] = {"phase": phase}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    return {
        "metadata": {"name": name, "labels": {"sandman.io/sandbox": sid}},
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }


def test_transitions_are_stamped_once_on_the_recorders_clock() -> None:
    t = [100.0]
    rec = PodRecorder(client=None, namespace="ns", label_selector="x", clock=lambda: t[0])  # type: ignore[arg-type]
    rec.t0 = 100.0
    t[0] = 100.5
    rec.observe("ADDED", _pod("a", "a"))
    t[0] = 101.0
    rec.observe("MODIFIED", _pod("a", "a", node="n1"))
    t[0] = 102.0
    rec.observe("MODIFIED", _pod("a", "a", node="n1", phase="Running"))
    t[0] = 103.0
    rec.observe("MODIFIED", _pod("a", "a", node="n1", phase="Running", ready=True))
    t[0] = 104.0
    rec.observe("MODIFIED", _pod("a", "a", node="n1", phase="Running", ready=True))
    s = rec.sandboxes["a"]
    assert (s.seen, s.bound, s.running, s.ready, s.node) == (0.5, 1.0, 2.0, 3.0, "n1")
    assert rec.counts == {"bound": 1, "running": 1, "ready": 1, "failed": 0}
    assert rec.live == {"a"}
    t[0] = 105.0
    rec.observe("DELETED", _pod("a", "a", node="n1", phase="Running", ready=True))
    assert s.deleted == 5.0 and not rec.live


def test_a_rejected_pod_and_its_replacement_share_one_record() -> None:
    rec = PodRecorder(client=None, namespace="ns", label_selector="x", clock=lambda: 1.0)  # type: ignore[arg-type]
    rec.t0 = 0.0
    rec.observe("MODIFIED", _pod("sb-1", "sb-1", node="n1", phase="Failed"))
    rec.observe("ADDED", _pod("sb-1-r1", "sb-1", node="n2", phase="Running", ready=True))
    assert len(rec.sandboxes) == 1
    s = rec.sandboxes["sb-1"]
    assert s.failed == "Failed" and s.ready == 1.0 and s.node == "n1"
