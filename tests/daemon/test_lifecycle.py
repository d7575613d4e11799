"""The daemon as a container's PID 1: idle exit, SIGTERM, zombie reaping, fork bombs."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sandman.sdk.daemon_client import SandboxClient
from tests.support.daemon import DaemonProcess, start_daemon
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio

PIDS_ROOT = Path("/sys/fs/cgroup/pids")


@pytest.mark.parametrize("daemon_args", [["--idle-timeout", "1"]])
async def test_idle_timeout_exits_cleanly_but_not_mid_command(
    daemon: DaemonProcess, client: SandboxClient
) -> None:
    result = await client.exec(argv=["sleep", "1.6"])  # longer than the idle timeout
    assert result.exit_code == 0
    assert daemon.proc.poll() is None
    await wait_until_async(lambda: daemon.proc.poll() is not None, timeout_s=5)
    assert daemon.proc.returncode == 0


async def test_sigterm_stops_every_child_promptly(
    daemon: DaemonProcess, client: SandboxClient
) -> None:
    proc = await client.start_process(command="trap '' TERM; sleep 60")
    await client.create_session("s")
    await client.run_in_session("s", "sleep 60 &")
    children = psutil.Process(daemon.proc.pid).children(recursive=True)
    assert len(children) >= 3
    started = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(10) == 0
    assert time.monotonic() - started < 6
    alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], alive
    assert proc.pid not in {p.pid for p in psutil.process_iter()}


async def test_orphans_are_reaped(daemon: DaemonProcess, client: SandboxClient) -> None:
    result = await client.exec(command="sleep 0.2 & exit 0")
    assert result.exit_code == 0
    me = psutil.Process(daemon.proc.pid)

    def no_zombies() -> bool:
        return all(c.status() != psutil.STATUS_ZOMBIE for c in me.children())

    await wait_until_async(lambda: reaped(client, 1))  # the orphaned sleep exited
    await wait_until_async(no_zombies)


async def test_as_pid_1_in_its_own_pid_namespace(tmp_path: Path) -> None:
    daemon = start_daemon(prefix=["unshare", "--pid", "--fork", "--mount-proc"], cwd=str(tmp_path))
    try:
        async with SandboxClient(daemon.url, daemon.token) as client:
            info = await client.info()
            assert info.is_pid1 and info.pid == 1
            for _ in range(3):
                await client.exec(command="sh -c 'sleep 0.1 &' ; exit 0")
            await wait_until_async(lambda: reaped(client, 3))  # the orphaned sleeps exited
            zombies = await client.exec(command="ps -eo stat= | grep -c '^Z' || true")
            assert zombies.stdout.data.strip() == "0"
    finally:
        inner = psutil.Process(daemon.proc.pid).children()
        for child in inner:
            child.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(10) == 0
        assert daemon.stop() == 0


async def reaped(client: SandboxClient, n: int) -> bool:
    return (await client.info()).orphans_reaped >= n


@pytest.fixture
def pids_cgroup() -> Iterator[Path]:
    if not os.access(PIDS_ROOT, os.W_OK):
        pytest.skip("needs a writable cgroup v1 pids hierarchy (root on this machine kind)")
    group = PIDS_ROOT / f"sandman-test-{os.getpid()}"
    group.mkdir()
    (group / "pids.max").write_text("64")
    try:
        yield group
    finally:
        deadline = time.monotonic() + 10
        while (group / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        group.rmdir()


async def test_fork_bomb_is_contained_and_the_daemon_survives(
    pids_cgroup: Path, tmp_path: Path
) -> None:
    procs = str(pids_cgroup / "cgroup.procs")

    def enter_cgroup() -> None:
        with open(procs, "w") as handle:
            handle.write(str(os.getpid()))

    daemon = start_daemon(cwd=str(tmp_path), preexec_fn=enter_cgroup)
    try:
        async with SandboxClient(daemon.url, daemon.token) as client:
            assert (await client.info()).limits.pids == 64
            bomb = await client.exec(
                command="bomb() { bomb | bomb & }; bomb; sleep 5", timeout_s=2, kill_grace_s=0.5
            )
            assert bomb.timed_out
            await wait_until_async(
                lambda: len(pids_cgroup.joinpath("cgroup.procs").read_text().split()) <= 2
            )
            after = await client.exec(argv=["echo", "alive"])
            assert after.stdout.data == "alive\n"
    finally:
        assert daemon.stop() == 0
