"""SWE-ReX on Sandman: ``SandmanDeployment`` and ``SandmanRuntime`` driven through SWE-ReX's own
request models by the real package, on the local stack
(tests/support/harness_scripts/swerex_runtime.py). Each behaviour SWE-agent relies on is
checked: session state, SWE-ReX's exceptions (timeouts, exit codes, syntax, sessions),
commands as ``subprocess.run`` reads them, files and uploads, and release on ``stop``.
SWE-ReX's own runtime-generic tests are run against it too (docs/integrations.md).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from sandman import SandboxNotFound, Sandman
from sandman.integrations import HarnessMissing
from tests.support.harnesses import run_harness_script
from tests.support.stack import RunningStack
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
IMAGE = "registry.example/tasks/swerex:1"


@pytest.fixture(scope="module")
def report(stack: RunningStack, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    scratch = tmp_path_factory.mktemp("swerex")
    return run_harness_script(
        "swerex_runtime", "run-swerex", IMAGE, str(scratch), url=stack.url, token=stack.token,
        workdir=scratch,
    )  # fmt: skip


def _raised(outcome: dict[str, Any]) -> str:
    return outcome.get("raised", "")


def test_sessions_keep_state_and_raise_swerex_exceptions(report: dict[str, Any]) -> None:
    steps = report["sessions"]
    assert steps["create"] == {"output": "", "session_type": "bash"}
    assert _raised(steps["create_again"]) == "SessionExistsError"
    assert steps["state"][1]["output"] == "/tmp\nhi 42\n" and steps["state"][1]["exit_code"] == 0
    assert steps["multiline"]["output"] == "test1\ntest2\n"
    assert steps["heredoc"]["output"] == "line one\nline two\n"
    assert steps["stderr"]["output"] == "out\nerr\n"  # a terminal's: both streams
    assert _raised(steps["check_raise"]) == "NonZeroExitCodeError"
    assert steps["check_silent"]["exit_code"] == 3
    assert steps["check_ignore"]["exit_code"] is None
    assert _raised(steps["syntax"]) == "BashIncorrectSyntaxError"
    assert steps["syntax_unchecked"]["exit_code"] not in (0, None)  # the shell's own verdict
    assert _raised(steps["timeout"]) == "CommandTimeoutError"
    assert steps["after_timeout"]["output"] == "alive\n"  # usable at once after a timeout
    assert steps["interrupt"]["exit_code"] == 0
    assert _raised(steps["interactive"]) == "InteractiveCommandsUnsupported"
    assert _raised(steps["no_session"]) == "SessionDoesNotExistError"
    assert _raised(steps["close"]) == ""
    assert _raised(steps["close_again"]) == "SessionDoesNotExistError"


def test_execute_reads_commands_as_subprocess_does(report: dict[str, Any]) -> None:
    steps = report["commands"]
    assert steps["shell"] == {"stdout": "hello\n", "stderr": "oops\n", "exit_code": 4}
    assert steps["argv"]["stdout"] == "a b|c|"
    assert steps["merged"] == {"stdout": "out\nerr\n", "stderr": "", "exit_code": 0}
    assert steps["cwd_env"]["stdout"] == "/tmp\nv1\n"
    assert _raised(steps["check"]) == "NonZeroExitCodeError"
    assert _raised(steps["timeout"]) == "CommandTimeoutError"


def test_files_and_uploads(report: dict[str, Any]) -> None:
    steps = report["commands"]
    assert _raised(steps["write"]) == ""
    assert steps["read"] == {"content": "héllo\n"}
    assert _raised(steps["read_missing"]) == "FileNotFoundError"
    assert steps["uploaded"]["stdout"] == "beeone\n"  # the directory, and the file's mode


def test_the_deployment_lifecycle_releases_the_sandbox(
    report: dict[str, Any], stack: RunningStack
) -> None:
    assert (report["alive_before_start"], report["alive"]) == (False, True)
    assert (report["alive_after_stop"], report["runtime_after_stop"]) == (
        False, "DeploymentNotStartedError",
    )  # fmt: skip
    with Sandman(stack.url, stack.token, lease_s=None, release_on_exit=False) as client:

        def released() -> bool:
            try:
                sandbox = client.get(report["sandbox_id"])
            except SandboxNotFound:
                return True
            return sandbox.state in ("releasing", "terminated")

        wait_until(released, timeout_s=10, interval_s=0.1)


def test_without_swerex_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sandman.integrations.swerex as integration

    monkeypatch.setitem(sys.modules, "swerex.runtime.abstract", None)
    monkeypatch.delitem(integration.__dict__, "SandmanDeployment", raising=False)
    with pytest.raises(HarnessMissing, match=r"pip install 'sandman\[swe-rex\]'"):
        integration.SandmanDeployment  # noqa: B018
