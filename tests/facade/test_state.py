"""The trainer's view of a sandbox pod: the table in facade/state.py, row by row."""

from __future__ import annotations

from typing import Any

import pytest

from facade.state import is_live, sandbox_from_pod
from tests.support.pods import sandbox_pod as pod


@pytest.mark.parametrize(
    ("kwargs", "extra", "state", "reason"),
    [
        ({}, {}, "pending", None),
        ({}, {"unschedulable": "0/3 nodes are available"}, "pending", "unschedulable"),
        ({"node": "n1"}, {}, "starting", None),
        ({"node": "n1", "phase": "Running", "ready": True}, {}, "ready", None),
        ({"node": "n1", "phase": "Running"}, {"was_ready": True}, "starting", "daemon_not_ready"),
        ({"node": "n1", "waiting": "ImagePullBackOff"}, {}, "failed", "image_pull_failed"),
        ({"node": "n1", "phase": "Failed", "reason": "OutOfcpu"}, {}, "pending",
         "admission_rejected"),
        ({"node": "n1", "phase": "Failed", "reason": "OutOfcpu", "attempt": 3}, {}, "failed",
         "admission_failed"),
        ({"node": "n1", "phase": "Succeeded"}, {"was_ready": True}, "terminated",
         "sandbox_exited"),
        ({"node": "n1", "phase": "Failed", "ran": True}, {}, "terminated", "sandbox_failed"),
        ({"node": "n1", "phase": "Failed"}, {}, "failed", "sandbox_failed"),
        ({"node": "n1", "phase": "Running", "ready": True, "deleting": True}, {}, "releasing",
         None),
    ],
)  # fmt: skip
def test_state_table(
    kwargs: dict[str, Any], extra: dict[str, Any], state: str, reason: str | None
) -> None:
    sandbox = sandbox_from_pod(pod(**kwargs), **extra)
    assert (sandbox.state, sandbox.reason) == (state, reason)


def test_fields_come_from_the_contract() -> None:
    sandbox = sandbox_from_pod(pod(node="n1", phase="Running", ready=True, attempt=1))
    assert sandbox.id == "sb-1" and sandbox.attempt == 1  # the label, not the pod name
    assert (sandbox.owner, sandbox.sandbox_class, sandbox.image) == ("run-1", "tiny", "img:1")
    assert sandbox.labels == {"task": "t7"}
    assert sandbox.ready_at == "2026-11-30T10:00:01Z" and sandbox.expires_at == "X"


def test_liveness_for_admission() -> None:
    assert is_live(pod()) and is_live(pod(node="n", phase="Running"))
    assert not is_live(pod(deleting=True))
    assert not is_live(pod(phase="Succeeded")) and not is_live(pod(phase="Failed"))
