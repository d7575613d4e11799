"""Tool calls on one sandbox: sessions, files and background processes.

Every operation is the daemon's own, reached through the facade under
``/v1/sandboxes/{id}/`` with :class:`sandman.sdk.daemon_client.SandboxClient` (one implementation
of the API for the daemon's tests, the demo and the SDK). What this layer adds: typed SDK
exceptions, a deadline per call (a command's own timeout plus slack), and trainer-shaped
helpers (text, directory upload/download as tar streams built off the event loop).

Tool calls are not idempotent, so they are not retried, with one exception that makes them
safe: an exec carries an id (the SDK draws one), and on a broken connection the very same
request is sent again (``ToolCalls.reattaching``). The daemon keeps the exec under that id and
re-attaches the retry to the one run: the command never runs twice (docs/daemon-api.md).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import io
import logging
import secrets
import tarfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import aiohttp
import anyio

from sandman.sdk.daemon_client import SandboxClient
from sandman.wire.daemon import DirEntry, FileStat, ProcessInfo
from sandman.wire.errors import Reason

from .errors import ClientReason, Conflict, ConnectionFailed, NotFound, SandmanError
from .results import ProcessLogs, SessionResult
from .settings import Timeouts

__all__ = [
    "AsyncFiles",
    "AsyncProcesses",
    "AsyncSession",
    "ToolCalls",
    "broken_connection",
    "command_fields",
    "new_exec_id",
    "open_session",
]

log = logging.getLogger("sandman.sdk")
T = TypeVar("T")
RetryDelay = Callable[[int, SandmanError], float | None]
"""(failed attempt number, its error) -> seconds to wait before the next, or None: give up."""


def new_exec_id() -> str:
    """An exec id no other call will draw (the daemon's ``Name`` pattern)."""
    return f"t-{secrets.token_hex(12)}"


def broken_connection(error: SandmanError) -> bool:
    """No answer came back on one hop or the other: the command may or may not have run."""
    return error.reason in (ClientReason.CONNECTION_FAILED, Reason.DAEMON_UNREACHABLE)


class ToolCalls:
    """The daemon client of one sandbox plus the SDK's deadline and error translation."""

    def __init__(
        self,
        client: SandboxClient,
        sandbox_id: str,
        timeouts: Timeouts,
        retry_delay: RetryDelay | None = None,
    ) -> None:
        self.client = client
        self.sandbox_id = sandbox_id
        self.timeouts = timeouts
        self._retry_delay = retry_delay or (lambda attempt, error: None)

    def reattach_delay(self, attempt: int, error: SandmanError) -> float | None:
        """Seconds before sending an exec again under its id, None to raise ``error``: only
        a broken connection is retried (an answer, even an error, is the call's outcome)."""
        return self._retry_delay(attempt, error) if broken_connection(error) else None

    async def reattaching(
        self, what: str, call: Callable[[], Awaitable[T]], command_timeout_s: float
    ) -> T:
        """``call`` (an exec under a fixed id), sent again after a broken connection."""
        attempt = 0
        while True:
            attempt += 1
            try:
                with self.guard(what, command_timeout_s):
                    return await call()
            except SandmanError as e:
                delay = self.reattach_delay(attempt, e)
                if delay is None:
                    raise
                log.info("%s on %s: %s; re-attaching in %.2f s", what, self.sandbox_id, e, delay)
                await anyio.sleep(delay)

    @contextlib.contextmanager
    def guard(self, what: str, command_timeout_s: float | None = None) -> Iterator[None]:
        """Bound the call and turn transport failures into :class:`ConnectionFailed`."""
        limit = (
            self.timeouts.tool_call_s
            if command_timeout_s is None
            else command_timeout_s + self.timeouts.tool_call_slack_s
        )
        try:
            with anyio.fail_after(limit):
                yield
        except TimeoutError as e:
            raise ConnectionFailed(
                f"{what} on {self.sandbox_id}: no answer in {limit:.0f} s",
                reason=ClientReason.TOOL_CALL_TIMEOUT,
            ) from e
        except aiohttp.ClientError as e:
            raise ConnectionFailed(
                f"{what} on {self.sandbox_id}: {type(e).__name__}: {e}",
                reason=ClientReason.CONNECTION_FAILED,
            ) from e


def command_fields(command: str | Sequence[str]) -> dict[str, Any]:
    if isinstance(command, str):
        return {"command": command}
    return {"argv": list(command)}


class AsyncSession:
    """A persistent shell (``cd``, ``export`` and shell variables carry over between runs)."""

    #: The session's name in its sandbox.
    name: str

    def __init__(self, calls: ToolCalls, name: str) -> None:
        self._calls = calls
        self.name = name

    async def run(self, command: str, *, timeout_s: float = 60.0) -> SessionResult:
        """Run one command; on timeout it gets Ctrl-C and the session stays usable."""
        with self._calls.guard(f"session {self.name} run", timeout_s):
            result = await self._calls.client.run_in_session(
                self.name, command, timeout_s=timeout_s
            )
        return SessionResult.from_wire(result)

    async def close(self) -> None:
        with self._calls.guard(f"session {self.name} close"):
            await self._calls.client.close_session(self.name)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Leaving the block must not mask the block's own exception, and a session whose
        # sandbox is already gone has nothing to close: log, don't raise.
        with anyio.CancelScope(shield=True):
            try:
                await self.close()
            except SandmanError as e:
                log.warning("could not close session %s: %s", self.name, e)


async def open_session(
    calls: ToolCalls,
    name: str,
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    shell: str | None = None,
) -> AsyncSession:
    """Create the session, or attach to an existing one of that name."""
    try:
        with calls.guard(f"session {name} create"):
            await calls.client.create_session(name, cwd=cwd, env=env or {}, shell=shell)
    except Conflict as e:
        if e.reason != Reason.SESSION_EXISTS:
            raise
    return AsyncSession(calls, name)


class AsyncFiles:
    """Files in the sandbox; relative paths resolve against the image's working directory."""

    def __init__(self, calls: ToolCalls) -> None:
        self._calls = calls

    async def read(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        with self._calls.guard(f"read {path}"):
            return await self._calls.client.read_file(path, offset, length)

    async def read_text(self, path: str) -> str:
        return (await self.read(path)).decode()

    async def write(self, path: str, data: bytes | str, *, mode: int | None = None) -> FileStat:
        """Atomic write (temp file + rename); parent directories are created."""
        raw = data.encode() if isinstance(data, str) else data
        with self._calls.guard(f"write {path}"):
            return await self._calls.client.write_file(path, raw, mode=mode)

    async def stat(self, path: str) -> FileStat:
        with self._calls.guard(f"stat {path}"):
            return await self._calls.client.stat(path)

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
        except NotFound:
            return False
        return True

    async def list(self, path: str = ".") -> list[DirEntry]:
        with self._calls.guard(f"list {path}"):
            return (await self._calls.client.list_dir(path)).entries

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        with self._calls.guard(f"remove {path}"):
            await self._calls.client.remove(path, recursive)

    async def move(self, source: str, destination: str, *, overwrite: bool = False) -> FileStat:
        with self._calls.guard(f"move {source}"):
            return await self._calls.client.move(source, destination, overwrite)

    async def upload_dir(self, local: str | Path, remote: str) -> builtins.list[DirEntry]:
        """Copy a local directory's contents into ``remote`` (one tar stream)."""
        archive = await asyncio.to_thread(_tar_directory, Path(local))
        with self._calls.guard(f"upload to {remote}"):
            return (await self._calls.client.upload_dir(remote, archive)).entries

    async def download_dir(self, remote: str, local: str | Path) -> Path:
        """Copy ``remote``'s contents into a local directory (created if missing)."""
        with self._calls.guard(f"download {remote}"):
            archive = await self._calls.client.download_dir(remote)
        target = Path(local)
        await asyncio.to_thread(_untar, archive, target)
        return target


def _tar_directory(root: Path) -> bytes:
    if not root.is_dir():
        raise NotADirectoryError(str(root))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for child in sorted(root.iterdir()):
            tar.add(child, arcname=child.name)
    return buffer.getvalue()


def _untar(archive: bytes, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        tar.extractall(target, filter="data")


class AsyncProcesses:
    """Background processes: start, poll, read their output tail, signal, wait, remove."""

    def __init__(self, calls: ToolCalls) -> None:
        self._calls = calls

    async def start(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> ProcessInfo:
        fields = command_fields(command)
        with self._calls.guard("start process"):
            return await self._calls.client.start_process(
                **fields, cwd=cwd, env=env or {}, name=name
            )

    async def list(self) -> builtins.list[ProcessInfo]:
        with self._calls.guard("list processes"):
            return (await self._calls.client.list_processes()).processes

    async def get(self, process_id: str) -> ProcessInfo:
        with self._calls.guard(f"process {process_id}"):
            return await self._calls.client.process(process_id)

    async def logs(self, process_id: str, *, tail_bytes: int | None = None) -> ProcessLogs:
        with self._calls.guard(f"process {process_id} output"):
            output = await self._calls.client.process_output(process_id, tail_bytes)
        return ProcessLogs.from_wire(output)

    async def signal(self, process_id: str, signal: str = "SIGTERM") -> ProcessInfo:
        with self._calls.guard(f"signal process {process_id}"):
            return await self._calls.client.signal_process(process_id, signal)

    async def wait(self, process_id: str, *, timeout_s: float = 60.0) -> ProcessInfo:
        """The process once it ended, or still ``running`` when ``timeout_s`` passed."""
        with self._calls.guard(f"wait process {process_id}", timeout_s):
            return await self._calls.client.wait_process(process_id, timeout_s)

    async def remove(self, process_id: str) -> ProcessInfo:
        """TERM, KILL after a grace period, then forget the record."""
        with self._calls.guard(f"remove process {process_id}"):
            return await self._calls.client.remove_process(process_id)
