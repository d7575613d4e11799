"""The blocking twins of a sandbox's bound helpers: ``Session``, ``Files``, ``Processes``.

They mirror ``tools`` (``AsyncSession``, ``AsyncFiles``, ``AsyncProcesses``) one method
each, through the portal of the ``Sandman`` that made their sandbox. ``Sandbox`` holds a
``Files`` and a ``Processes`` and opens a ``Session``; kept apart from ``sync`` so the
client and sandbox wrappers read on their own, as ``tools`` stands apart from ``sandbox``.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from anyio.from_thread import BlockingPortal

from sandman.wire.daemon import DirEntry, FileStat, ProcessInfo

from .results import ProcessLogs, SessionResult
from .sync_portal import Bound, twin_of
from .tools import AsyncFiles, AsyncProcesses, AsyncSession

__all__ = ["Files", "Processes", "Session"]


class Session(Bound):
    def __init__(self, portal: BlockingPortal, session: AsyncSession) -> None:
        super().__init__(portal)
        self._async = session
        self.name = session.name

    @twin_of(AsyncSession.run)
    def run(self, command: str, *, timeout_s: float = 60.0) -> SessionResult:
        return self._call(self._async.run, command, timeout_s=timeout_s)

    @twin_of(AsyncSession.close)
    def close(self) -> None:
        self._call(self._async.close)

    @twin_of(AsyncSession.__aenter__)
    def __enter__(self) -> Session:
        return self

    @twin_of(AsyncSession.__aexit__)
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._call(self._async.__aexit__, exc_type, exc, tb)


class Files(Bound):
    def __init__(self, portal: BlockingPortal, files: AsyncFiles) -> None:
        super().__init__(portal)
        self._async = files

    @twin_of(AsyncFiles.read)
    def read(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        return self._call(self._async.read, path, offset=offset, length=length)

    @twin_of(AsyncFiles.read_text)
    def read_text(self, path: str) -> str:
        return self._call(self._async.read_text, path)

    @twin_of(AsyncFiles.write)
    def write(self, path: str, data: bytes | str, *, mode: int | None = None) -> FileStat:
        return self._call(self._async.write, path, data, mode=mode)

    @twin_of(AsyncFiles.stat)
    def stat(self, path: str) -> FileStat:
        return self._call(self._async.stat, path)

    @twin_of(AsyncFiles.exists)
    def exists(self, path: str) -> bool:
        return self._call(self._async.exists, path)

    @twin_of(AsyncFiles.list)
    def list(self, path: str = ".") -> builtins.list[DirEntry]:
        return self._call(self._async.list, path)

    @twin_of(AsyncFiles.remove)
    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._call(self._async.remove, path, recursive=recursive)

    @twin_of(AsyncFiles.move)
    def move(self, source: str, destination: str, *, overwrite: bool = False) -> FileStat:
        return self._call(self._async.move, source, destination, overwrite=overwrite)

    @twin_of(AsyncFiles.upload_dir)
    def upload_dir(self, local: str | Path, remote: str) -> builtins.list[DirEntry]:
        return self._call(self._async.upload_dir, local, remote)

    @twin_of(AsyncFiles.download_dir)
    def download_dir(self, remote: str, local: str | Path) -> Path:
        return self._call(self._async.download_dir, remote, local)


class Processes(Bound):
    def __init__(self, portal: BlockingPortal, processes: AsyncProcesses) -> None:
        super().__init__(portal)
        self._async = processes

    @twin_of(AsyncProcesses.start)
    def start(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> ProcessInfo:
        return self._call(self._async.start, command, cwd=cwd, env=env, name=name)

    @twin_of(AsyncProcesses.list)
    def list(self) -> builtins.list[ProcessInfo]:
        return self._call(self._async.list)

    @twin_of(AsyncProcesses.get)
    def get(self, process_id: str) -> ProcessInfo:
        return self._call(self._async.get, process_id)

    @twin_of(AsyncProcesses.logs)
    def logs(self, process_id: str, *, tail_bytes: int | None = None) -> ProcessLogs:
        return self._call(self._async.logs, process_id, tail_bytes=tail_bytes)

    @twin_of(AsyncProcesses.signal)
    def signal(self, process_id: str, signal: str = "SIGTERM") -> ProcessInfo:
        return self._call(self._async.signal, process_id, signal)

    @twin_of(AsyncProcesses.wait)
    def wait(self, process_id: str, *, timeout_s: float = 60.0) -> ProcessInfo:
        return self._call(self._async.wait, process_id, timeout_s=timeout_s)

    @twin_of(AsyncProcesses.remove)
    def remove(self, process_id: str) -> ProcessInfo:
        return self._call(self._async.remove, process_id)
