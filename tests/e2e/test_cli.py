"""The trainer CLI (``sandman create/exec/ls/rm``) as subprocesses against the real stack."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime

import pytest

from sandman import Sandman
from sandman.cli import parse_args
from tests.support.stack import RunningStack as Stack
from tests.support.wait import wait_until

pytestmark = pytest.mark.timeout(90)
IMAGE = "registry.example/tasks/demo:1"


def _sandman(
    stack: Stack, *args: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SANDMAN_URL": stack.url, "SANDMAN_TOKEN": token or stack.token}
    return subprocess.run(
        [sys.executable, "-m", "sandman", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _timestamp(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_create_exec_ls_rm(stack: Stack, owner: str) -> None:
    request = ["--label", "k=v", "--env", "GREETING=hi there", "--ttl-s", "600"]
    created = _sandman(stack, "create", IMAGE, "-n", "3", "--owner", owner, *request)
    assert created.returncode == 0, created.stderr
    ids = created.stdout.split()
    assert len(ids) == 3 and all(i.startswith("sb-") for i in ids)

    ran = _sandman(stack, "exec", ids[0], "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (ran.returncode, ran.stdout, ran.stderr) == (7, "out\n", "err\n")
    shell = _sandman(stack, "exec", ids[1], "--timeout-s", "30", "--", "echo $((6 * 7)) | tr 4 x")
    assert (shell.returncode, shell.stdout) == (0, "x2\n")
    # The request's flags reached the sandbox: its environment, its expiry.
    env = _sandman(stack, "exec", ids[2], "--", 'echo "$GREETING"')
    assert (env.returncode, env.stdout) == (0, "hi there\n")
    with Sandman(stack.url, stack.token, owner=owner, lease_s=None,
                 release_on_exit=False) as client:  # fmt: skip
        view = client.get(ids[2]).view
    # The expiry is stamped when the facade renders the pod, the creation time when the API
    # server stores it; both are whole seconds, so a render at :44.99 stored at :45.01 reads 599.
    lived = (_timestamp(view.expires_at) - _timestamp(view.created_at)).total_seconds()
    assert 599 <= lived <= 600, (view.created_at, view.expires_at)

    listed = _sandman(stack, "ls", "--owner", owner, "--label", "k=v")
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:3] == ["ID", "OWNER", "STATE"]
    assert sorted(line.split()[0] for line in lines[1:]) == sorted(ids)
    assert all(line.split()[1:3] == [owner, "ready"] for line in lines[1:])

    removed = _sandman(stack, "rm", ids[0])
    assert removed.returncode == 0 and removed.stdout == f"released {ids[0]}\n"
    by_owner = _sandman(stack, "rm", "--owner", owner)
    assert by_owner.returncode == 0 and by_owner.stdout.startswith("released 2 ")

    def none_listed() -> bool:
        rows = _sandman(stack, "ls", "--owner", owner).stdout.splitlines()[1:]  # under the header
        assert not rows, f"still listed after rm: {rows}"
        return True

    wait_until(none_listed, timeout_s=20, interval_s=0.3)


def test_errors_are_reasons_with_a_nonzero_exit(stack: Stack) -> None:
    missing = _sandman(stack, "exec", "sb-nope", "--", "true")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: sandbox_not_found: ")
    denied = _sandman(stack, "ls", token="wrong")
    assert denied.returncode == 1 and denied.stderr.startswith("error: unauthenticated: ")
    bad_class = _sandman(stack, "create", IMAGE, "--class", "no-such-class")
    assert bad_class.returncode == 1 and bad_class.stderr.startswith("error: unknown_class: ")
    # A value the request's type refuses is a usage error, found before anything is sent.
    bad_ttl = _sandman(stack, "create", IMAGE, "--ttl-s", "0")
    assert bad_ttl.returncode == 2
    assert "argument --ttl-s: '0': Expected `int` >= 1" in bad_ttl.stderr


@pytest.mark.parametrize(
    ("argv", "timeout_s", "command"),
    [
        (["exec", "sb-1", "--timeout-s", "5", "--", "sh", "-c", "x"], 5.0, ["sh", "-c", "x"]),
        (["exec", "--timeout-s", "5", "sb-1", "--", "ls", "--", "-l"], 5.0, ["ls", "--", "-l"]),
        (["exec", "sb-1", "echo hi"], 60.0, ["echo hi"]),
        (["exec", "sb-1", "--", "--timeout-s"], 60.0, ["--timeout-s"]),
    ],
)
def test_exec_options_stand_anywhere_before_the_command(
    argv: list[str], timeout_s: float, command: list[str]
) -> None:
    args = parse_args(argv)
    assert (args.id, args.timeout_s, args.command_argv) == ("sb-1", timeout_s, command)
