"""mini-swe-agent on Sandman: its own agent loop and test model, its own environment selection,
a real sandbox on the local stack (tests/support/harness_scripts/mini_swe_agent_task.py).

What is checked is what a trainer relies on: the task is solved and submitted through the
completion marker, stdout and stderr arrive merged, each action runs in a fresh shell with
the configured cwd and env, a timeout and a failing command are observations (not
exceptions), the token is in no trajectory, and the sandbox is released afterwards. A sandbox
that disappears mid-run ends the run with the SDK's reason as its exit status.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sandman import SandboxNotFound, Sandman
from sandman.integrations import HarnessMissing
from sandman.integrations.mini_swe_agent import SandmanEnvironment
from tests.support.harnesses import run_harness_script
from tests.support.stack import RunningStack
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
IMAGE = "registry.example/tasks/mswea:1"


def _run(stack: RunningStack, mode: str, owner: str, tmp_path: Path) -> dict:
    return run_harness_script(
        "mini_swe_agent_task", mode, owner, IMAGE, url=stack.url, token=stack.token,
        workdir=tmp_path,
    )  # fmt: skip


def _released(stack: RunningStack, sandbox_id: str) -> None:
    with Sandman(stack.url, stack.token, lease_s=None, release_on_exit=False) as client:

        def gone() -> bool:
            try:
                sandbox = client.get(sandbox_id)
            except SandboxNotFound:
                return True
            return sandbox.state in ("releasing", "terminated")

        wait_until(gone, timeout_s=10, interval_s=0.1)


def test_the_default_agent_solves_a_task_in_a_sandbox(
    stack: RunningStack, owner: str, tmp_path: Path
) -> None:
    run = _run(stack, "task", owner, tmp_path)
    assert run["result"]["exit_status"] == "Submitted"
    assert run["result"]["submission"] == "5\n"
    made, summed, fresh_shell, slept, failed = run["observations"][:5]
    assert "<returncode>0</returncode>" in made and "made" in made
    assert "5\noops" in summed  # stderr merged into the output, in write order
    assert "/tmp\nsum" in fresh_shell  # the config's cwd and env; the earlier `cd` is gone
    assert "<returncode>-1</returncode>" in slept and "timed out after 2 seconds" in slept
    assert "<returncode>3</returncode>" in failed
    environment = run["serialized"]["info"]["config"]["environment"]
    assert environment["image"] == IMAGE and "token" not in environment
    assert run["serialized"]["info"]["sandman"]["owner"] == owner
    assert run["template_vars"]["system"] == "Linux" and run["template_vars"]["machine"]
    assert "token" not in run["template_vars"]
    _released(stack, run["sandbox_id"])


def test_a_sandbox_lost_mid_run_ends_the_run_with_its_reason(
    stack: RunningStack, owner: str, tmp_path: Path
) -> None:
    run = _run(stack, "lost", owner, tmp_path)
    assert run["result"]["exit_status"] in ("SandboxNotFound", "SandboxTerminated")
    assert run["result"]["sandbox_id"] == run["sandbox_id"]
    assert run["observations"] == []
    _released(stack, run["sandbox_id"])


def test_without_the_harness_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """The module imports without mini-swe-agent (this venv lacks it); using it says what to
    install, before any sandbox is created."""
    monkeypatch.setitem(sys.modules, "minisweagent.exceptions", None)
    with pytest.raises(HarnessMissing, match=r"pip install 'sandman\[mini-swe-agent\]'"):
        SandmanEnvironment(image=IMAGE, url="http://127.0.0.1:9", token="unused")
