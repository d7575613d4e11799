"""Child processes of the daemon: spawn, reap, signal.

The daemon is PID 1 of its container, so it must reap every zombie in the container, not only
its own children: orphans are re-parented to it. asyncio's child watchers wait for specific
pids and would leave orphans as zombies, so the supervisor owns *all* reaping: one SIGCHLD
handler calls ``waitpid(-1, WNOHANG)`` until nothing is left, resolves the future of each child
it started and counts the rest as reaped orphans. Outside a container (simcluster's process
mode, tests) the daemon marks itself a child subreaper so it plays the same role for the
processes it started.

Every command runs in its own session (and so its own process group), so an interrupt can
signal the command and its group with one ``killpg``; stopping a call for good (a timeout,
a removal, a closed session) stops its whole *scope* (``scopes.py``), which also reaches what
left the group. At shutdown every descendant of the daemon is killed, whatever its scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

from .scopes import SCOPE_ENV, Scope, kill_descendants

__all__ = [
    "Child",
    "Supervisor",
    "child_environment",
    "parse_signal",
    "sanitize_environment",
    "scrub_environment_block",
    "signal_name",
]

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
#: Removed and overwritten at start: the token, and its verifier (no secret, but nothing a
#: task needs either).
SECRET_VARIABLES = ("SANDMAN_TOKEN", "SANDMAN_TOKEN_SHA256")
# Variables a PyInstaller bundle sets for itself; never handed to task processes. (The
# bundle's runtime hook already cleans them at start; this is the second line of defence.)
BUNDLE_ENV_PREFIXES = ("_PYI_", "_MEIPASS")


def parse_signal(name: str) -> signal.Signals:
    """``"INT"``, ``"SIGINT"`` or ``"2"`` -> ``signal.SIGINT``; ValueError if unknown."""
    if name.isdigit():
        return signal.Signals(int(name))
    upper = name.upper()
    return signal.Signals[upper if upper.startswith("SIG") else f"SIG{upper}"]


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def sanitize_environment(environ: MutableMapping[str, str]) -> None:
    """Make the daemon's own environment the one task processes should inherit.

    Done once at start-up, in place: it removes the token and bundle internals, so that a
    command inherits the container's environment and nothing of the daemon's.
    """
    for key in [k for k in environ if k.startswith(BUNDLE_ENV_PREFIXES)]:
        del environ[key]
    for name in SECRET_VARIABLES:
        environ.pop(name, None)
    original = environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is not None:
        environ["LD_LIBRARY_PATH"] = original


def scrub_environment_block(names: Sequence[str] = SECRET_VARIABLES) -> int:
    """Overwrite ``NAME=value`` entries in this process's initial environment block.

    Removing a variable from ``os.environ`` (``unsetenv``) drops the C library's pointer to
    it, but the bytes stay where the kernel put them at ``execve``, and ``/proc/<pid>/environ``
    shows exactly those bytes to any process of the sandbox that may read it (the daemon is
    PID 1: ``/proc/1/environ``). The block lies in our own memory, between ``env_start`` and
    ``env_end`` of ``/proc/self/stat``: the entries are zeroed in place (call this after
    ``sanitize_environment``, so nothing still points at them). Returns how many were.
    """
    import ctypes  # imported here, like in install(): needed once

    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # (50) env_start, (51) env_end
    except (OSError, IndexError, ValueError):
        return 0
    if not 0 < start < end:
        return 0
    block = ctypes.string_at(start, end - start)
    scrubbed = 0
    offset = 0
    for entry in block.split(b"\0"):
        if any(entry.startswith(name.encode() + b"=") for name in names):
            ctypes.memset(start + offset, 0, len(entry))
            scrubbed += 1
        offset += len(entry) + 1
    return scrubbed


def child_environment(overrides: Mapping[str, str]) -> dict[str, str] | None:
    """The environment for a task process: None (inherit the daemon's) unless overridden."""
    if not overrides:
        return None
    return {**os.environ, **overrides}


@dataclass(slots=True)
class Child:
    """A process the supervisor started; ``exit_status`` is ``os.waitstatus_to_exitcode``."""

    popen: subprocess.Popen[bytes]
    exited: asyncio.Future[int] = field(repr=False)
    scope: Scope

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def running(self) -> bool:
        return not self.exited.done()

    async def wait(self) -> int:
        return await asyncio.shield(self.exited)

    def signal_group(self, signum: int) -> bool:
        """Signal the child's whole process group; False if it is already gone."""
        try:
            os.killpg(self.popen.pid, signum)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    async def terminate(self, grace_s: float) -> None:
        """TERM the child's whole scope, KILL what is left after ``grace_s``; returns once
        nothing of it is left and the child is reaped."""
        await self.scope.terminate(grace_s)
        await self.wait()


class Supervisor:
    """Starts children and reaps every process that dies under the daemon."""

    def __init__(self) -> None:
        self._children: dict[int, Child] = {}
        self.orphans_reaped = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_signal_handler(signal.SIGCHLD, self.reap)
        with contextlib.suppress(OSError, AttributeError):
            import ctypes  # imported here: it costs start-up time and is needed once

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            # Not dumpable: /proc/<daemon>/mem (and ptrace, process_vm_readv) then need
            # CAP_SYS_PTRACE, which containers do not get, so a process of the sandbox cannot
            # read the token out of the daemon's memory. (/proc/<pid>/environ stays
            # readable: scrub_environment_block covers it.) Children are unaffected: execve
            # makes a process dumpable again.
            libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        self.reap()  # anything that died before the handler was installed

    def uninstall(self) -> None:
        if self._loop is not None:
            self._loop.remove_signal_handler(signal.SIGCHLD)
            self._loop = None

    @property
    def children(self) -> list[Child]:
        return list(self._children.values())

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        stdin: int | None = subprocess.DEVNULL,
        stdout: int | None = subprocess.PIPE,
        stderr: int | None = subprocess.PIPE,
        preexec_fn: Callable[[], None] | None = None,
    ) -> Child:
        """Start ``argv`` in a new session and a new scope (``env``: the child's environment,
        None for the daemon's). Raises OSError (e.g. ENOENT) if it cannot start."""
        loop = asyncio.get_running_loop()
        scope_id = os.urandom(8).hex()
        popen = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env={**(os.environ if env is None else env), SCOPE_ENV: scope_id},
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=preexec_fn is None,
            preexec_fn=preexec_fn,
            close_fds=True,
        )
        # Registered before any SIGCHLD callback can run: handlers run as loop callbacks.
        child = Child(popen, loop.create_future(), Scope(scope_id, popen.pid))
        self._children[popen.pid] = child
        return child

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            child = self._children.pop(pid, None)
            if child is None:
                self.orphans_reaped += 1
                continue
            child.popen.returncode = code
            if not child.exited.done():
                child.exited.set_result(code)

    async def stop_all(self, grace_s: float) -> None:
        """TERM every child's scope, KILL after the grace; then kill every descendant left
        (adopted orphans, whatever escaped a scope)."""
        children = list(self._children.values())
        await asyncio.gather(*(c.terminate(grace_s) for c in children))
        await kill_descendants()
        self.reap()
