"""A command run inside a running ``process``-runtime container (``kubectl exec``).

Why ``nsenter`` into the container's own namespaces rather than a second bubblewrap: an
exec must see what the container sees *now* — its private ``/tmp`` (a tmpfs only its mount
namespace holds), the files its processes wrote there, its processes (``ps`` shows PID 1 as
the pod's command), its hostname — and must end when the container ends. A new bwrap would
build a fresh root with an empty ``/tmp`` and its own PID namespace. So the command joins
the mount, UTS, IPC and PID namespaces of the container's PID 1 (bwrap's child; the user
namespace too when bwrap made one, as it does when not run as root), takes its root, starts
in the container's ``workingDir`` (``--wd`` opens ``/proc/<pid>/root/<dir>``, i.e. the
directory as the container sees it), and gets the container's environment. Like runc's
exec, it runs with the container's privileges, not the kubelet's: ``setpriv`` drops every
capability from the bounding and inheritable sets but those the securityContext adds and
sets ``no_new_privs``, so ``CapEff`` is 0 as it is for the pod's own processes. Joining the
PID namespace also means the kernel kills the command when the container's PID 1 exits, as
a real runtime's exec ends with its container.

Without bubblewrap (pods run unconfined) the command runs as the pod's do: with the
container's environment and working directory.

A TTY request gets a pseudo-terminal of the container's own ``devpts`` (bwrap's ``/dev``
mounts a private instance: opened through ``/proc/<pid>/root/dev/ptmx``), so ``tty`` names
``/dev/pts/0`` and the terminal exists in the container's ``/dev`` as runc's console does;
unconfined, the ``pty`` module's ``openpty``. The command is the leader of a new session
whose controlling terminal is the PTY's other side (``setsid --ctty``), so shells get job
control and ``SIGWINCH`` on a resize; its output is one stream (stderr goes to the terminal
too), and ``TERM`` is ``xterm`` unless the container sets one (containerd does the same for
a TTY exec).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import shutil
import signal
import struct
import termios
from collections.abc import Mapping
from pathlib import Path

from simcluster.kubelet.runtime import Container

__all__ = [
    "PipeExec",
    "PtyExec",
    "container_pty",
    "exec_argv",
    "init_pid",
    "start_exec",
    "terminal_session",
]


def _tool(name: str) -> str:
    """A util-linux program by absolute path (the exec's environment is the container's,
    whose PATH need not hold it)."""
    return shutil.which(name) or f"/usr/bin/{name}"


def init_pid(bwrap_pid: int) -> int:
    """The PID (in our namespace) of the container's PID 1: bwrap's child in a new PID
    namespace. bwrap's own process stays in ours to wait for it."""
    own = os.readlink("/proc/self/ns/pid")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != bwrap_pid:
                continue
            if os.readlink(entry / "ns" / "pid") != own:
                return int(entry.name)
        except (OSError, ValueError, IndexError):
            continue  # it exited while we looked
    raise ProcessLookupError(f"no sandboxed child of bwrap (pid {bwrap_pid})")


def _caps(container: Container) -> str:
    return ",".join(["-all", *(f"+{cap.lower()}" for cap in container.security.add)])


def exec_argv(pid: int, container: Container, command: tuple[str, ...], tty: bool) -> list[str]:
    """``nsenter`` into the namespaces of ``pid`` (the container's PID 1), then ``setpriv``
    down to the container's privileges, then the command (in a terminal session of its
    own with ``tty``; module docstring)."""
    joins = ["--mount", "--uts", "--ipc", "--pid"]
    if os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user"):
        joins += ["--user", "--preserve-credentials"]
    workdir = (container.working_dir or "/").lstrip("/")
    caps = _caps(container)
    return [
        _tool("nsenter"), f"--target={pid}", *joins, "--root", f"--wd=/proc/{pid}/root/{workdir}",
        "--", "/usr/bin/setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}",
        "--no-new-privs", "--", *(terminal_session(command) if tty else command),
    ]  # fmt: skip


def terminal_session(command: tuple[str, ...]) -> list[str]:
    """``command`` as the leader of a new session whose controlling terminal is its stdin.
    Inside the container's PID namespace: a shell restores the terminal's foreground
    process group on exit, which must be one it can see."""
    return [_tool("setsid"), "--ctty", *command]


#: Linux ioctls the termios module lacks: open a PTY's other side from its master
#: (4.13+), or unlock it and ask its number (asm-generic encodings).
TIOCGPTPEER, TIOCSPTLCK, TIOCGPTN = 0x5441, 0x40045431, 0x80045430


def container_pty(pid: int) -> tuple[int, int]:
    """A PTY (master, other side) of the devpts instance in the ``/dev`` of ``pid``."""
    dev = f"/proc/{pid}/root/dev"
    master = os.open(f"{dev}/ptmx", os.O_RDWR | os.O_NOCTTY)
    try:
        fcntl.ioctl(master, TIOCSPTLCK, struct.pack("i", 0))
        try:
            return master, fcntl.ioctl(master, TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY)
        except OSError:  # an older kernel: by the number's path
            (number,) = struct.unpack("i", fcntl.ioctl(master, TIOCGPTN, b"\0" * 4))
            return master, os.open(f"{dev}/pts/{number}", os.O_RDWR | os.O_NOCTTY)
    except BaseException:
        os.close(master)
        raise


def _exit_code(returncode: int) -> int:
    """A signal's death as the exit status a shell (and containerd) reports: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class PipeExec:
    """A command with pipes for stdin (when asked for), stdout and stderr."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def write_stdin(self, data: bytes) -> None:
        if self.proc.stdin is None or self.proc.stdin.is_closing():
            return
        with contextlib.suppress(ConnectionError):
            self.proc.stdin.write(data)
            await self.proc.stdin.drain()

    def close_stdin(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()

    async def read_stdout(self) -> bytes:
        assert self.proc.stdout is not None
        return await self.proc.stdout.read(65536)

    async def read_stderr(self) -> bytes:
        assert self.proc.stderr is not None
        return await self.proc.stderr.read(65536)

    def resize(self, width: int, height: int) -> None:
        return None  # no terminal

    async def wait(self) -> int:
        return _exit_code(await self.proc.wait())

    async def kill(self) -> None:
        _killpg(self.proc)
        await self.proc.wait()


class PtyExec:
    """A command on a pseudo-terminal: one output stream, stdin typed into the terminal."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int) -> None:
        self.proc = proc
        self.master = master
        self._output: asyncio.Queue[bytes] = asyncio.Queue()
        self._eof = False
        self._loop = asyncio.get_running_loop()
        os.set_blocking(master, False)
        self._loop.add_reader(master, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: every holder of the terminal's other side has closed it
            data = b""
        if not data:
            self._loop.remove_reader(self.master)
        self._output.put_nowait(data)

    async def read_stdout(self) -> bytes:
        if self._eof:
            return b""
        data = await self._output.get()
        self._eof = not data
        return data

    async def read_stderr(self) -> bytes:
        return b""

    async def write_stdin(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.master, view) :]
            except BlockingIOError:
                await self._writable()
            except OSError:
                return  # the terminal is gone

    async def _writable(self) -> None:
        ready = self._loop.create_future()
        self._loop.add_writer(self.master, ready.set_result, None)
        try:
            await ready
        finally:
            self._loop.remove_writer(self.master)

    def close_stdin(self) -> None:
        # a terminal's end of input is its EOF character, typed (as a user's Ctrl-D)
        with contextlib.suppress(OSError):
            os.write(self.master, bytes([termios.tcgetattr(self.master)[6][termios.VEOF][0]]))

    def resize(self, width: int, height: int) -> None:
        with contextlib.suppress(OSError):
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))

    async def wait(self) -> int:
        code = _exit_code(await self.proc.wait())
        return code

    async def kill(self) -> None:
        _killpg(self.proc)
        await self.proc.wait()
        self.close()

    def close(self) -> None:
        if self.master >= 0:
            self._loop.remove_reader(self.master)
            os.close(self.master)
            self.master = -1


def _killpg(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


async def start_exec(
    argv: list[str],
    env: Mapping[str, str],
    workdir: str | None,
    *,
    stdin: bool,
    tty: bool,
    pty_of: int | None = None,
) -> PipeExec | PtyExec:
    """Start ``argv`` (``exec_argv``'s, or the command of an unconfined pod, in a
    ``terminal_session`` with ``tty``); a TTY is one of the devpts of process ``pty_of``
    (the container's PID 1) when given."""
    if not tty:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=workdir,
            start_new_session=True,
        )
        return PipeExec(proc)
    master, slave = container_pty(pty_of) if pty_of is not None else pty.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=slave, stdout=slave, stderr=slave,
            env={"TERM": "xterm", **env}, cwd=workdir, start_new_session=True,
        )  # fmt: skip
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return PtyExec(proc, master)
