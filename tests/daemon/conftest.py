"""Fixtures that start real sandbox daemons as separate processes on loopback."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import pytest

from devstack.launcher import LocalDaemon, start_local_daemon
from sandman.sdk.daemon_client import SandboxClient

DaemonProcess = LocalDaemon


def start_daemon(
    args: Sequence[str] = (),
    *,
    prefix: Sequence[str] = (),
    cwd: str | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> LocalDaemon:
    """Start ``python -m daemon.sandbox`` on a free loopback port and wait until it listens."""
    return start_local_daemon(cwd or os.getcwd(), args, prefix=prefix, preexec_fn=preexec_fn)


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


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


async def eventually(predicate: Callable[[], bool], within_s: float = 5.0) -> bool:
    """``wait_until`` for async tests: polls without blocking the event loop."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()
