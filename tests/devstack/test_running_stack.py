"""The stack fixture's helper (tests/support/stack.py ``running_stack``) that tests/e2e,
tests/cri and tests/manifests share: a stack whose start fails half-way — simcluster and the
controller started, the controller exiting on a flag it does not know — raises the stack's
error naming the controller and leaves no process of the stack running (the fixtures called
``start`` outside the stack's context manager, and a failed start left simcluster behind)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from devstack.stack import StackError, StackSettings
from tests.support.stack import running_stack

pytestmark = pytest.mark.timeout(60)


def _stack_children() -> list[str]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "-m simcluster" in cmdline or "-m controller" in cmdline:
            found.append(cmdline)
    return found


def test_a_stack_that_fails_to_start_leaves_nothing_running(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    settings = StackSettings(
        workdir=tmp_path,
        nodes=1,
        facade_replicas=0,
        controller_args=("--no-such-flag",),
        start_timeout_s=30,
    )
    with (
        pytest.raises(StackError, match="controller exited"),
        running_stack(settings, pytestconfig),
    ):
        pytest.fail("the stack must not start")
    assert _stack_children() == []
