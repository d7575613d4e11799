"""The daemon as a container's PID 1: idle exit, SIGTERM, zombie reaping, fork bombs.

The fork-bomb test needs a pids cgroup it can create (cgroup v2 with the pids controller, or
a v1 pids hierarchy, writable: root). Without one it skips with the reason; under CI it
fails instead, so CI cannot go green without having contained a fork bomb.
"""

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
from tests.support.prerequisites import missing
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.anyio

CGROUP_ROOT = Path("/sys/fs/cgroup")


@pytest.mark.parametrize("daemon_args", [["--idle-timeout-s", "1"]])
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


class NoPidsCgroup(Exception):
    pass


def pids_cgroup_parent(root: Path = CGROUP_ROOT) -> Path:
    """The cgroup under which this test may create one with a pids limit, or why none.

    cgroup v2 (Debian 12's default): the root cgroup, its pids controller enabled for
    children (root cgroups are exempt from the no-internal-processes rule). cgroup v1: the
    pids hierarchy's root."""
    controllers = root / "cgroup.controllers"
    if controllers.exists():
        if "pids" not in controllers.read_text().split():
            raise NoPidsCgroup(f"cgroup v2 at {root} has no pids controller")
        subtree = root / "cgroup.subtree_control"
        if not os.access(subtree, os.W_OK):
            raise NoPidsCgroup(f"cgroup v2 at {root} is not writable (run as root)")
        if "pids" not in subtree.read_text().split():
            try:
                subtree.write_text("+pids")
            except OSError as e:
                raise NoPidsCgroup(f"cannot enable the pids controller at {root}: {e}") from e
        return root
    v1 = root / "pids"
    if v1.is_dir():
        if not os.access(v1, os.W_OK):
            raise NoPidsCgroup(f"the cgroup v1 pids hierarchy {v1} is not writable (run as root)")
        return v1
    raise NoPidsCgroup(f"no pids cgroup: neither cgroup v2 nor a v1 pids hierarchy at {root}")


@pytest.fixture
def pids_cgroup() -> Iterator[Path]:
    try:
        parent = pids_cgroup_parent()
    except NoPidsCgroup as e:
        missing(f"fork-bomb containment needs a pids cgroup it can create: {e}")
    group = parent / f"sandman-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "pids.max").write_text("64")
        yield group
    finally:
        procs = group / "cgroup.procs"
        wait_until(lambda: not procs.read_text().strip(), interval_s=0.05, what=f"{procs} empty")
        group.rmdir()


async def test_the_pids_cgroup_is_found_in_v1_and_v2_layouts(tmp_path: Path) -> None:
    """pids_cgroup_parent on fake cgroup trees (the machine running the suite has one kind)."""
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (v2 / "cgroup.subtree_control").write_text("memory\n")
    assert pids_cgroup_parent(v2) == v2
    assert (v2 / "cgroup.subtree_control").read_text() == "+pids"  # enabled for children
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    with pytest.raises(NoPidsCgroup, match="no pids controller"):
        pids_cgroup_parent(v2)
    v1 = tmp_path / "v1"
    (v1 / "pids").mkdir(parents=True)
    assert pids_cgroup_parent(v1) == v1 / "pids"
    with pytest.raises(NoPidsCgroup, match="neither cgroup v2 nor a v1 pids hierarchy"):
        pids_cgroup_parent(tmp_path / "none")


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
