"""Persistent shell sessions against a real daemon: state, interrupts, shells, exit."""

from __future__ import annotations

import asyncio
import time

import psutil
import pytest

from sandman.sdk.daemon_client import DaemonAPIError, SandboxClient
from tests.support.daemon import DaemonProcess
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio

SHELLS = ["/bin/bash", "/bin/sh"]  # Debian's sh is dash: no bash-isms, like busybox images


@pytest.mark.parametrize("shell", SHELLS)
async def test_state_persists_between_commands(client: SandboxClient, shell: str) -> None:
    await client.create_session("s", shell=shell)
    try:
        first = await client.run_in_session("s", "cd / && export FOO=bar && X=1")
        assert first.exit_code == 0
        second = await client.run_in_session("s", "pwd; echo $FOO $X; echo e >&2; false")
        assert second.exit_code == 1
        assert second.output.data == "/\nbar 1\ne\n"
    finally:
        await client.close_session("s")


@pytest.mark.parametrize("shell", SHELLS)
async def test_timeout_interrupts_and_keeps_the_session(client: SandboxClient, shell: str) -> None:
    await client.create_session("s", shell=shell)
    try:
        await client.run_in_session("s", "X=kept")
        hung = await client.run_in_session("s", "echo before; sleep 30", timeout_s=0.5)
        assert hung.timed_out
        assert hung.exit_code == 130
        assert "before" in hung.output.data
        after = await client.run_in_session("s", "echo $X")
        assert (after.exit_code, after.output.data) == (0, "kept\n")
    finally:
        await client.close_session("s")


async def test_command_ignoring_ctrl_c_is_killed(client: SandboxClient) -> None:
    await client.create_session("s")
    try:
        stuck = await client.run_in_session(
            "s", "trap '' INT; sleep 30", timeout_s=0.3, kill_grace_s=0.3
        )
        assert stuck.timed_out
        assert stuck.exit_code == 137
        assert (await client.run_in_session("s", "echo ok")).output.data == "ok\n"
    finally:
        await client.close_session("s")


async def test_multiline_heredoc_and_long_commands(client: SandboxClient) -> None:
    await client.create_session("s")
    try:
        script = "cat <<'EOF'\nline 1\n$NOT_EXPANDED\nEOF\nfor i in 1 2; do\n  echo $i\ndone"
        result = await client.run_in_session("s", script)
        assert result.output.data == "line 1\n$NOT_EXPANDED\n1\n2\n"
        long_value = "x" * 20_000  # far beyond a terminal's 4096-byte line limit
        result = await client.run_in_session("s", f"V={long_value}; echo ${{#V}}")
        assert result.output.data == "20000\n"
    finally:
        await client.close_session("s")


async def test_exit_ends_the_session(client: SandboxClient) -> None:
    await client.create_session("s")
    result = await client.run_in_session("s", "exit 7")
    assert result.exit_code == 7
    assert not result.session_alive
    with pytest.raises(DaemonAPIError) as info:
        await client.run_in_session("s", "echo hi")
    assert info.value.reason == "session_exited"
    await client.close_session("s")


async def test_concurrent_commands_queue_in_order(client: SandboxClient) -> None:
    await client.create_session("s")
    try:
        first = asyncio.ensure_future(client.run_in_session("s", "sleep 0.3; N=1"))
        await wait_until_async(lambda: session_busy(client, "s"))
        second = await client.run_in_session("s", "echo $N")
        assert (await first).exit_code == 0
        assert second.output.data == "1\n"
    finally:
        await client.close_session("s")


async def session_busy(client: SandboxClient, name: str) -> bool:
    return any(s.name == name and s.busy for s in (await client.list_sessions()).sessions)


async def test_session_errors_and_listing(client: SandboxClient) -> None:
    await client.create_session("a")
    try:
        with pytest.raises(DaemonAPIError) as dup:
            await client.create_session("a")
        assert (dup.value.status, dup.value.reason) == (409, "session_exists")
        listed = await client.list_sessions()
        assert [s.name for s in listed.sessions] == ["a"]
        with pytest.raises(DaemonAPIError) as missing:
            await client.run_in_session("nope", "true")
        assert (missing.value.status, missing.value.reason) == (404, "session_not_found")
        with pytest.raises(DaemonAPIError) as bad:
            await client.create_session("../x")
        assert (bad.value.status, bad.value.reason) == (400, "invalid_request")
    finally:
        await client.close_session("a")
    assert (await client.list_sessions()).sessions == []


@pytest.mark.parametrize("daemon_args", [["--max-sessions", "1"]])
async def test_session_cap_answers_429(client: SandboxClient) -> None:
    await client.create_session("one")
    try:
        with pytest.raises(DaemonAPIError) as info:
            await client.create_session("two")
        assert (info.value.status, info.value.reason) == (429, "too_many_sessions")
    finally:
        await client.close_session("one")


async def test_terminal_flood_between_commands_keeps_the_daemon_small(
    daemon: DaemonProcess, client: SandboxClient
) -> None:
    """A background job writing to the terminal while no command collects its output once grew
    the daemon by ~70 MiB/s (every byte kept for the next command, which discarded it)."""
    me = psutil.Process(daemon.proc.pid)
    await client.create_session("s")
    try:
        before = me.memory_info().rss
        await client.run_in_session("s", "yes > /dev/tty &")
        peak = before
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # sampling memory over a fixed span, not waiting
            peak = max(peak, me.memory_info().rss)
            await asyncio.sleep(0.1)
        assert peak - before < 32 << 20, f"RSS grew by {(peak - before) >> 20} MiB"
        result = await client.run_in_session("s", "kill %1; wait; echo done")
        assert result.output.data.endswith("done\n")
        assert (await client.run_in_session("s", "echo ok")).output.data == "ok\n"
    finally:
        await client.close_session("s")
