"""Fixtures that start real sandbox daemons as separate processes on loopback."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from sandman.sdk.daemon_client import SandboxClient
from tests.support.daemon import DaemonProcess, start_daemon


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
