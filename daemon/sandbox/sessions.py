"""Persistent shell sessions: one interactive shell on a pseudo-terminal per session.

Why a pty and an interactive shell: an agent's session must keep cwd, exported variables and
shell variables between commands, and a command that hangs must be interruptible *without*
losing the session. A non-interactive shell that receives Ctrl-C dies with its command; an
interactive shell with job control runs each command in its own foreground process group, so
writing ``\\x03`` to the terminal interrupts the command and the shell survives, exactly as for
a person at a terminal. Works with bash (``--noediting``) and with busybox/dash ``sh``.

Protocol with the shell: the command text is written to a file in the daemon's scratch
directory and *sourced* (so multi-line scripts, heredocs and long commands are not limited by
the terminal's line length), followed on the same line by a ``printf`` of a marker carrying a
per-command nonce and ``$?``. Everything the terminal printed before the marker is the
command's output. Echo is off, so the marker's format string never appears in the output.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shutil
import signal
import struct
import termios
import time
from dataclasses import dataclass

from sandman.wire.daemon import (
    SessionCreateRequest,
    SessionInfo,
    SessionRunRequest,
    SessionRunResult,
)
from sandman.wire.errors import Reason

from .commands import check_cwd, check_env, check_shell
from .errors import DaemonError
from .output import HeadCapture, PipeReader
from .settings import DaemonSettings
from .supervisor import Child, Supervisor

__all__ = ["SessionManager", "TerminalBuffer", "find_scratch_dir"]

MARKER_RE = re.compile(rb"\x1eSANDMAN ([0-9a-f]{16}) (\d+)\x1e\n?")
READY_TIMEOUT_S = 10.0
SHELL_ENV = {
    "PS1": "",
    "PS2": "",
    "PS4": "+ ",
    "PROMPT_COMMAND": "",
    "TERM": "dumb",
    "HISTFILE": "",
}
SCRATCH_CANDIDATES = ("/sandman-run", "/tmp", "/dev/shm", "/run", "/var/tmp")


def find_scratch_dir(preferred: str | None) -> str | None:
    """A private writable directory for command files, or None if the rootfs has none."""
    for base in (preferred, *SCRATCH_CANDIDATES):
        if not base:
            continue
        path = os.path.join(base, f"sandman-{os.getpid()}")
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            probe = os.path.join(path, ".probe")
            with open(probe, "w"):
                pass
            os.unlink(probe)
            return path
        except OSError:
            continue
    return None


def _default_shell(env: dict[str, str]) -> str:
    for name in ("bash", "sh"):
        found = shutil.which(name, path=env.get("PATH", os.defpath))
        if found:
            return found
    return "/bin/sh"


def _shell_argv(shell: str) -> list[str]:
    if os.path.basename(shell) == "bash":
        return [shell, "--norc", "--noprofile", "--noediting", "-i"]
    return [shell, "-i"]


def _configure_terminal(fd: int) -> None:
    """No echo (so our marker command is invisible), no CR-before-LF, a wide window."""
    attrs = termios.tcgetattr(fd)
    attrs[1] &= ~termios.ONLCR  # oflag
    attrs[3] &= ~(termios.ECHO | termios.ECHONL | termios.ECHOCTL)  # lflag
    termios.tcsetattr(fd, termios.TCSANOW, attrs)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))


def _become_terminal_owner() -> None:  # runs in the child between fork and exec
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class TerminalBuffer(bytearray):
    """What the terminal printed and no command has collected yet, bounded.

    A command's collector empties it at every wake-up; between commands nobody does, and a
    background job writing to the terminal (``yes > /dev/tty &``) once grew the daemon by
    ~70 MiB/s. Past ``cap`` the oldest bytes are dropped and counted (a command's output
    reports them in ``total_bytes``; between commands they would be discarded anyway: a
    command's output starts when the command does)."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap
        self.dropped = 0

    def append_bounded(self, data: bytes) -> None:
        self.extend(data)
        overflow = len(self) - self.cap
        if overflow > 0:
            del self[:overflow]
            self.dropped += overflow

    def reset(self) -> None:
        self.clear()
        self.dropped = 0

    def take_dropped(self) -> int:
        dropped, self.dropped = self.dropped, 0
        return dropped


@dataclass(slots=True)
class _Session:
    name: str
    shell: str
    child: Child
    master_fd: int
    reader: PipeReader
    created_at: float
    buffer: TerminalBuffer
    data_event: asyncio.Event
    lock: asyncio.Lock
    commands_run: int = 0

    def info(self) -> SessionInfo:
        return SessionInfo(
            name=self.name,
            shell=self.shell,
            pid=self.child.pid,
            alive=self.child.running,
            busy=self.lock.locked(),
            commands_run=self.commands_run,
            created_at=self.created_at,
        )


class SessionManager:
    def __init__(self, settings: DaemonSettings, supervisor: Supervisor) -> None:
        self._settings = settings
        self._supervisor = supervisor
        self._sessions: dict[str, _Session] = {}
        self._scratch: str | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    def list(self) -> list[SessionInfo]:
        return [s.info() for s in self._sessions.values()]

    def get(self, name: str) -> _Session:
        session = self._sessions.get(name)
        if session is None:
            raise DaemonError(f"no session named {name!r}", reason=Reason.SESSION_NOT_FOUND)
        return session

    async def create(self, request: SessionCreateRequest) -> SessionInfo:
        check_env(request.env)
        check_cwd(request.cwd)
        check_shell(request.shell)
        if request.name in self._sessions:
            raise DaemonError(
                f"session {request.name!r} already exists", reason=Reason.SESSION_EXISTS
            )
        if len(self._sessions) >= self._settings.max_sessions:
            raise DaemonError("too many sessions", reason=Reason.TOO_MANY_SESSIONS)
        self._scratch = self._scratch or find_scratch_dir(self._settings.run_dir)
        if self._scratch is None:
            raise DaemonError(
                "no writable scratch directory for sessions", reason=Reason.NO_SCRATCH_DIR
            )
        env = {**os.environ, **SHELL_ENV, **request.env}
        shell = request.shell or _default_shell(env)
        session = self._spawn(request.name, shell, env, request.cwd or self._settings.workdir)
        self._sessions[request.name] = session
        try:
            await self._sync(session, time.monotonic() + READY_TIMEOUT_S)
        except Exception:
            await self.close(request.name)
            raise
        return session.info()

    def _spawn(self, name: str, shell: str, env: dict[str, str], cwd: str | None) -> _Session:
        master, slave = os.openpty()
        try:
            _configure_terminal(slave)
            child = self._supervisor.spawn(
                _shell_argv(shell),
                cwd=cwd,
                env=env,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                preexec_fn=_become_terminal_owner,
            )
        except BaseException as exc:  # whatever failed, the terminal must not leak
            os.close(master)
            if isinstance(exc, OSError):
                raise DaemonError(
                    f"cannot start shell {shell!r}: {exc}", reason=Reason.SPAWN_FAILED
                ) from exc
            raise
        finally:
            os.close(slave)
        buffer = TerminalBuffer(self._settings.session_buffer_bytes)
        event = asyncio.Event()

        def on_data(data: bytes) -> None:
            buffer.append_bounded(data)
            event.set()

        reader = PipeReader(os.dup(master), on_data)
        return _Session(
            name, shell, child, master, reader, time.time(), buffer, event, asyncio.Lock()
        )

    async def run(self, name: str, request: SessionRunRequest) -> SessionRunResult:
        session = self.get(name)
        cap = self._settings.default_output_bytes
        if request.max_output_bytes is not None:
            cap = min(request.max_output_bytes, self._settings.max_output_bytes)
        async with session.lock:
            if not session.child.running:
                raise DaemonError(f"session {name!r} has exited", reason=Reason.SESSION_EXITED)
            return await self._run_locked(session, request, cap)

    async def _run_locked(
        self, session: _Session, request: SessionRunRequest, cap: int
    ) -> SessionRunResult:
        assert self._scratch is not None
        nonce = os.urandom(8).hex()
        script = os.path.join(self._scratch, f"cmd-{nonce}.sh")
        with open(script, "w") as handle:
            handle.write(request.command + "\n")
        started = time.monotonic()
        capture = HeadCapture(cap)
        timed_out = False
        try:
            session.buffer.reset()
            self._write(
                session, f". '{script}'; printf '\\036SANDMAN %s %d\\036\\n' {nonce} \"$?\"\n"
            )
            code = await self._collect(session, nonce, capture, started + request.timeout_s)
            if code is None:
                timed_out = True
                code = await self._interrupt(session, capture, request.kill_grace_s)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(script)
        session.commands_run += 1
        return SessionRunResult(
            exit_code=code,
            timed_out=timed_out,
            duration_s=round(time.monotonic() - started, 6),
            output=capture.output(),
            session_alive=session.child.running,
        )

    @staticmethod
    def _write(session: _Session, text: str) -> None:
        os.write(session.master_fd, text.encode())

    async def _collect(
        self, session: _Session, nonce: str, capture: HeadCapture, deadline: float
    ) -> int | None:
        """Move terminal output into ``capture`` until the marker with ``nonce``; its status.

        Returns None at the deadline; raises if the shell exits first.
        """
        while True:
            capture.skip(session.buffer.take_dropped())
            match = _find_marker(session.buffer, nonce)
            if match is not None:
                code = int(match.group(2))  # before the buffer it points into changes
                capture.feed(_strip_markers(session.buffer[: match.start()]))
                del session.buffer[: match.end()]
                return code
            keep = 64  # a marker may be arriving in pieces: hold back a short tail
            if len(session.buffer) > keep:
                capture.feed(_strip_markers(session.buffer[:-keep]))
                del session.buffer[:-keep]
            if session.reader.closed.done():  # the shell exited (e.g. the command ran `exit`)
                capture.feed(_strip_markers(session.buffer))
                session.buffer.reset()
                code = await session.child.wait()
                return code if code >= 0 else 128 - code
            session.data_event.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await _wait_data_or_exit(session)

    async def _interrupt(self, session: _Session, capture: HeadCapture, grace_s: float) -> int:
        """Ctrl-C the foreground command; if it ignores that, KILL its process group."""
        os.write(session.master_fd, b"\x03")
        for attempt in range(2):
            nonce = os.urandom(8).hex()
            await asyncio.sleep(0.05)
            self._write(session, f"printf '\\036SANDMAN %s %d\\036\\n' {nonce} 130\n")
            code = await self._collect(
                session, nonce, capture, time.monotonic() + max(grace_s, 0.2)
            )
            if code is not None:
                return 130 if attempt == 0 else 137
            self._kill_foreground(session)
        session.child.signal_group(signal.SIGKILL)
        raise DaemonError(
            "session did not recover from an interrupt; it was killed", reason=Reason.SESSION_KILLED
        )

    @staticmethod
    def _kill_foreground(session: _Session) -> None:
        with contextlib.suppress(OSError):
            pgrp = os.tcgetpgrp(session.master_fd)
            # 0 (no foreground job) would mean *our own* group to killpg: never signal that.
            if pgrp > 1 and pgrp not in (session.child.pid, os.getpgrp()):
                os.killpg(pgrp, signal.SIGKILL)

    async def _sync(self, session: _Session, deadline: float) -> None:
        nonce = os.urandom(8).hex()
        self._write(session, f"printf '\\036SANDMAN %s %d\\036\\n' {nonce} 0\n")
        startup = HeadCapture(4096)
        code = await self._collect(session, nonce, startup, deadline)
        if code is None or not session.child.running:
            said = startup.output().data.strip()
            raise DaemonError(
                f"shell did not become ready: {said!r}", reason=Reason.SESSION_NOT_READY
            )

    async def close(self, name: str) -> None:
        session = self._sessions.pop(name, None)
        if session is None:
            raise DaemonError(f"no session named {name!r}", reason=Reason.SESSION_NOT_FOUND)
        await self._terminate(session)

    async def _terminate(self, session: _Session) -> None:
        self._kill_foreground(session)
        session.child.signal_group(signal.SIGHUP)  # as a closed terminal would: jobs get it too
        await session.child.terminate(self._settings.shutdown_grace_s)
        session.reader.close()
        with contextlib.suppress(OSError):
            os.close(session.master_fd)

    async def close_all(self) -> None:
        for name in list(self._sessions):
            with contextlib.suppress(Exception):
                await self.close(name)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


def _strip_markers(data: bytearray) -> bytes:
    """Markers of earlier, interrupted commands are protocol, not output."""
    return MARKER_RE.sub(b"", bytes(data))


def _find_marker(buffer: bytearray, nonce: str) -> re.Match[bytes] | None:
    for match in MARKER_RE.finditer(buffer):
        if match.group(1).decode() == nonce:
            return match
    return None


async def _wait_data_or_exit(session: _Session) -> None:
    waiters = {
        asyncio.ensure_future(session.data_event.wait()),
        asyncio.ensure_future(asyncio.shield(session.reader.closed)),
    }
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
