# Generated from sandman/sdk/tools.py by `make generate` (codegen): do not edit.
"""The blocking twin of :mod:`sandman.sdk.tools`: Session, Files, Processes.

Each method is one call of its async twin through the portal
(:mod:`sandman.sdk.blocking.portal`); generated from the async source by ``codegen.blocking``.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from sandman.sdk.blocking.portal import Bound
from sandman.sdk.results import ProcessLogs, SessionResult
from sandman.sdk.tools import AsyncFiles, AsyncProcesses, AsyncSession
from sandman.wire.daemon import DirEntry, FileStat, ProcessInfo

__all__ = ["Files", "Processes", "Session"]


class Session(Bound[AsyncSession]):
    """Blocking twin of :class:`sandman.sdk.tools.AsyncSession`.

    A persistent shell (``cd``, ``export`` and shell variables carry over between runs)."""

    @property
    def name(self) -> str:
        """The session's name in its sandbox."""
        return self._async.name

    def run(self, command: str, *, timeout_s: float = 60.0) -> SessionResult:
        """Run one command; on timeout it gets Ctrl-C and the session stays usable."""
        return self._call(lambda: self._async.run(command, timeout_s=timeout_s))

    def close(self) -> None:
        self._call(lambda: self._async.close())

    def __enter__(self) -> Session:
        return self._wrap(Session, self._call(lambda: self._async.__aenter__()))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._call(lambda: self._async.__aexit__(exc_type, exc, tb))


class Files(Bound[AsyncFiles]):
    """Blocking twin of :class:`sandman.sdk.tools.AsyncFiles`.

    Files in the sandbox; relative paths resolve against the image's working directory."""

    def read(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        return self._call(lambda: self._async.read(path, offset=offset, length=length))

    def read_text(self, path: str) -> str:
        return self._call(lambda: self._async.read_text(path))

    def write(self, path: str, data: bytes | str, *, mode: int | None = None) -> FileStat:
        """Atomic write (temp file + rename); parent directories are created."""
        return self._call(lambda: self._async.write(path, data, mode=mode))

    def stat(self, path: str) -> FileStat:
        return self._call(lambda: self._async.stat(path))

    def exists(self, path: str) -> bool:
        return self._call(lambda: self._async.exists(path))

    def list(self, path: str = ".") -> list[DirEntry]:
        return self._call(lambda: self._async.list(path))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._call(lambda: self._async.remove(path, recursive=recursive))

    def move(self, source: str, destination: str, *, overwrite: bool = False) -> FileStat:
        return self._call(lambda: self._async.move(source, destination, overwrite=overwrite))

    def upload_dir(self, local: str | Path, remote: str) -> builtins.list[DirEntry]:
        """Copy a local directory's contents into ``remote`` (one tar stream)."""
        return self._call(lambda: self._async.upload_dir(local, remote))

    def download_dir(self, remote: str, local: str | Path) -> Path:
        """Copy ``remote``'s contents into a local directory (created if missing)."""
        return self._call(lambda: self._async.download_dir(remote, local))


class Processes(Bound[AsyncProcesses]):
    """Blocking twin of :class:`sandman.sdk.tools.AsyncProcesses`.

    Background processes: start, poll, read their output tail, signal, wait, remove."""

    def start(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> ProcessInfo:
        return self._call(lambda: self._async.start(command, cwd=cwd, env=env, name=name))

    def list(self) -> builtins.list[ProcessInfo]:
        return self._call(lambda: self._async.list())

    def get(self, process_id: str) -> ProcessInfo:
        return self._call(lambda: self._async.get(process_id))

    def logs(self, process_id: str, *, tail_bytes: int | None = None) -> ProcessLogs:
        return self._call(lambda: self._async.logs(process_id, tail_bytes=tail_bytes))

    def signal(self, process_id: str, signal: str = "SIGTERM") -> ProcessInfo:
        return self._call(lambda: self._async.signal(process_id, signal))

    def wait(self, process_id: str, *, timeout_s: float = 60.0) -> ProcessInfo:
        """The process once it ended, or still ``running`` when ``timeout_s`` passed."""
        return self._call(lambda: self._async.wait(process_id, timeout_s=timeout_s))

    def remove(self, process_id: str) -> ProcessInfo:
        """TERM, KILL after a grace period, then forget the record."""
        return self._call(lambda: self._async.remove(process_id))
