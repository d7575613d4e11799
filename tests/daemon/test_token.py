"""The daemon's token: a sandbox's agent cannot read it back, and it opens only its sandbox.

The token reaches the daemon in its environment (a pod's env or a mounted file). The daemon
removes it from its environment before any command runs, and overwrites it in the process's
initial environment block, which is what ``/proc/1/environ`` shows to anything in the
sandbox. Even a stolen token would grant nothing beyond its own sandbox: every daemon has
its own.
"""

from __future__ import annotations

import aiohttp
import pytest

from daemon.sandbox.layout import token_digest
from sandman.sdk.daemon_client import SandboxClient
from tests.support.daemon import DaemonProcess, start_daemon

pytestmark = pytest.mark.anyio

WITHOUT_PTRACE = ["setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace", "--"]


async def test_the_token_is_not_in_the_daemons_environment_block(
    daemon: DaemonProcess, client: SandboxClient
) -> None:
    with open(f"/proc/{daemon.proc.pid}/environ", "rb") as handle:
        block = handle.read()
    assert daemon.token.encode() not in block
    assert b"SANDMAN_TOKEN=" not in block
    seen = await client.exec(command="tr '\\0' '\\n' < /proc/$PPID/environ; env")
    assert daemon.token not in seen.stdout.data
    assert "PATH=" in seen.stdout.data  # the rest of the environment is intact


async def test_a_token_opens_only_its_own_sandbox(daemon: DaemonProcess, tmp_path: object) -> None:
    other = start_daemon(cwd=str(tmp_path))
    try:
        assert other.token != daemon.token
        async with aiohttp.ClientSession() as session:
            for url, token, status in (
                (daemon.url, daemon.token, 200),
                (other.url, daemon.token, 401),
                (daemon.url, other.token, 401),
            ):
                headers = {"Authorization": f"Bearer {token}"}
                async with session.get(url + "/v1/info", headers=headers) as r:
                    assert r.status == status
    finally:
        assert other.stop() == 0


async def test_the_daemons_memory_is_closed_to_its_sandbox(tmp_path: object) -> None:
    """As in a container: the daemon and the agent share a uid and capabilities, without
    CAP_SYS_PTRACE. The daemon is not dumpable, so the agent cannot read its memory, where
    the token still lives. (/proc/<pid>/environ stays readable: its block is scrubbed.)"""
    daemon = start_daemon(cwd=str(tmp_path), prefix=WITHOUT_PTRACE)
    try:
        pid = daemon.proc.pid  # setpriv execs the daemon: same process
        with open(f"/proc/{pid}/stat") as handle:
            env_start = int(handle.read().rsplit(")", 1)[1].split()[47])
        async with SandboxClient(daemon.url, daemon.token) as client:
            probe = await client.exec(
                command=(
                    f"dd if=/proc/{pid}/mem of=/dev/null bs=1 count=1 skip={env_start}"
                    " iflag=skip_bytes 2>/dev/null && echo readable"
                )
            )
        assert probe.stdout.data == "", probe
    finally:
        assert daemon.stop() == 0


async def test_a_daemon_given_only_the_verifier_opens_to_its_token(tmp_path: object) -> None:
    """As a sandbox pod starts it (facade/podspec.py): SANDMAN_TOKEN_SHA256, never the token.
    The token still opens it, nothing else does, and the verifier is gone from what a command
    can read (environment and environment block)."""
    daemon = start_daemon(cwd=str(tmp_path), verifier_only=True)
    try:
        verifier = token_digest(daemon.token).hex()
        with open(f"/proc/{daemon.proc.pid}/environ", "rb") as handle:
            block = handle.read()
        assert daemon.token.encode() not in block and verifier.encode() not in block
        async with aiohttp.ClientSession() as session:
            for token, status in ((daemon.token, 200), (verifier, 401), ("x" * 32, 401)):
                headers = {"Authorization": f"Bearer {token}"}
                async with session.get(daemon.url + "/v1/info", headers=headers) as r:
                    assert r.status == status, token
        async with SandboxClient(daemon.url, daemon.token) as client:
            seen = await client.exec(command="env; tr '\\0' '\\n' < /proc/$PPID/environ")
        assert verifier not in seen.stdout.data and "SANDMAN_TOKEN" not in seen.stdout.data
    finally:
        assert daemon.stop() == 0
