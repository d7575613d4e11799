"""The trainer CLI (``sandman create/exec/ls/rm``) as subprocesses against the real stack."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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


def test_create_exec_ls_rm(stack: Stack, owner: str) -> None:
    created = _sandman(stack, "create", IMAGE, "-n", "3", "--owner", owner, "--label", "k=v")
    assert created.returncode == 0, created.stderr
    ids = created.stdout.split()
    assert len(ids) == 3 and all(i.startswith("sb-") for i in ids)

    ran = _sandman(stack, "exec", ids[0], "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (ran.returncode, ran.stdout, ran.stderr) == (7, "out\n", "err\n")
    shell = _sandman(stack, "exec", ids[1], "--", "echo $((6 * 7)) | tr 4 x")
    assert (shell.returncode, shell.stdout) == (0, "x2\n")

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
