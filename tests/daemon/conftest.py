"""Fixtures that start real sandbox daemons as separate processes on loopback."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devstack.rootfs import RootfsError, find_bwrap
from sandman.sdk.daemon_client import SandboxClient
from tests.support.daemon import DaemonProcess, start_daemon
from tests.support.leaks import FIXTURE_PIDS

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def daemon_args() -> list[str]:
    return []


@pytest.fixture
def daemon(daemon_args: list[str], tmp_path: os.PathLike[str]) -> Iterator[DaemonProcess]:
    process = start_daemon(daemon_args, cwd=str(tmp_path))
    try:
        yield process
    finally:
        code = process.stop()
        assert code == 0, f"daemon exited with {code}"


@pytest.fixture
async def client(daemon: DaemonProcess) -> AsyncIterator[SandboxClient]:
    async with SandboxClient(daemon.url, daemon.token) as c:
        yield c


@pytest.fixture(scope="module")
def sandboxed_daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DaemonProcess]:
    """A daemon that generated requests may do anything to: it runs under bubblewrap in its
    own user, pid, IPC and UTS namespaces, the host's file system read-only, a private /tmp
    and /dev, and a writable workdir (/tmp/sandbox) of its own. Fuzzed deletes, moves,
    uploads and commands can then hurt nothing but that sandbox; its network is the host's,
    so it is reached on loopback."""
    try:
        bwrap = find_bwrap()
    except RootfsError as exc:
        pytest.fail(str(exc))
    workdir = tmp_path_factory.mktemp("sandbox")
    prefix = [
        bwrap, "--unshare-user", "--uid", "0", "--gid", "0", "--unshare-pid",
        "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--ro-bind", "/", "/",
        "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev",
        "--bind", str(workdir), "/tmp/sandbox", "--chdir", "/tmp/sandbox",
    ]  # fmt: skip
    # The private /tmp hides whatever the host keeps there: a checkout (and its venv) under
    # /tmp, as a clean clone for CI is, is bound back read-only or the daemon cannot start.
    for path in sorted({REPO_ROOT, Path(sys.prefix).resolve()}):
        if path.is_relative_to("/tmp"):
            prefix += ["--ro-bind", str(path), str(path)]
    process = start_daemon(prefix=prefix, cwd=str(workdir))
    request.config.stash.setdefault(FIXTURE_PIDS, set()).add(process.proc.pid)
    try:
        yield process
    finally:
        process.stop()
