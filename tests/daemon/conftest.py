"""Fixtures that start real sandbox daemons as separate processes on loopback."""

from __future__ import annotations

import asyncio
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass

import pytest

from daemon.sandbox.client import SandboxClient


@dataclass
class DaemonProcess:
    proc: subprocess.Popen[bytes]
    url: str
    token: str

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def start_daemon(
    args: Sequence[str] = (),
    *,
    prefix: Sequence[str] = (),
    cwd: str | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> DaemonProcess:
    """Start ``python -m daemon.sandbox`` on a free loopback port and wait until it listens."""
    token = secrets.token_hex(16)
    env = {**os.environ, "SANDMAN_TOKEN": token, "SANDMAN_LOG_LEVEL": "WARNING"}
    argv = [*prefix, sys.executable, "-m", "daemon.sandbox", "--host", "127.0.0.1", "--port", "0"]
    proc = subprocess.Popen(
        [*argv, *args], stdout=subprocess.PIPE, env=env, cwd=cwd, preexec_fn=preexec_fn
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 15)
    line = proc.stdout.readline().decode() if ready else ""
    if "listening on" not in line:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"daemon did not start: {line!r}")
    port = int(line.rsplit(":", 1)[1])
    return DaemonProcess(proc, f"http://127.0.0.1:{port}", token)


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
        assert process.proc.stdout is not None
        process.proc.stdout.close()
        assert code == 0, f"daemon exited with {code}"


@pytest.fixture
async def client(daemon: DaemonProcess) -> AsyncIterator[SandboxClient]:
    async with SandboxClient(daemon.url, daemon.token) as c:
        yield c


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """``wait_until`` for async tests: polls without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()
