"""File operations inside the sandbox: streamed reads and atomic writes, stat, list, remove,
move, and directory upload/download as tar streams.

Everything streams in bounded chunks, so a multi-GiB file never sits in the daemon's memory.
Writes are atomic (a temporary file in the target directory, then ``rename``), so a reader
never sees half a file and a failed upload leaves the old content in place.

Paths: relative paths resolve against the daemon's working directory. The daemon runs with the
task's privileges and the agent already has a shell, so paths are not a security boundary;
what must hold is that the daemon itself survives anything (NUL bytes, missing parents,
directories where files are expected) and that a tar upload never writes outside its target
directory (``tarfile``'s ``data`` extraction filter rejects absolute paths, ``..`` members and
links that escape).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from collections.abc import AsyncIterator, Iterator
from typing import IO, Literal, cast

from sandman.wire.daemon import DirEntry, DirListing, FileStat, MoveRequest

from .errors import BadRequest, Conflict, DaemonError, NotFound

__all__ = ["FileService"]

CHUNK = 64 * 1024
FileType = Literal["file", "directory", "symlink", "other"]


def _kind(mode: int) -> FileType:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _translate(exc: OSError, path: str) -> DaemonError:
    """Map an OSError to the API's error with a stable reason, keeping the cause."""
    if isinstance(exc, FileNotFoundError):
        err: DaemonError = NotFound(f"{path}: no such file or directory", reason="file_not_found")
    elif isinstance(exc, IsADirectoryError):
        err = BadRequest(f"{path}: is a directory", reason="is_a_directory")
    elif isinstance(exc, NotADirectoryError):
        err = BadRequest(f"{path}: not a directory", reason="not_a_directory")
    elif isinstance(exc, FileExistsError):
        err = Conflict(f"{path}: already exists", reason="file_exists")
    elif isinstance(exc, PermissionError):
        err = DaemonError(f"{path}: permission denied", reason="permission_denied")
        err.status = 403
    elif exc.errno is not None and exc.errno == 39:  # ENOTEMPTY
        err = Conflict(f"{path}: directory not empty", reason="directory_not_empty")
    else:
        err = DaemonError(f"{path}: {exc.strerror or exc}", reason="io_error")
    err.__cause__ = exc
    return err


class FileService:
    def __init__(self, workdir: str | None, max_entries: int) -> None:
        self._workdir = workdir
        self._max_entries = max_entries

    def resolve(self, path: str | None) -> str:
        if not path:
            raise BadRequest("query parameter 'path' is required", reason="missing_path")
        if "\0" in path:
            raise BadRequest("NUL byte in path", reason="invalid_path")
        base = self._workdir or os.getcwd()
        return os.path.normpath(os.path.join(base, path))

    # -- metadata --------------------------------------------------------------------------

    def stat(self, path: str) -> FileStat:
        full = self.resolve(path)
        try:
            st = os.lstat(full)
            target = os.readlink(full) if stat.S_ISLNK(st.st_mode) else None
        except OSError as exc:
            raise _translate(exc, full) from exc
        return FileStat(
            path=full,
            type=_kind(st.st_mode),
            size=st.st_size,
            mode=stat.S_IMODE(st.st_mode),
            mtime=st.st_mtime,
            uid=st.st_uid,
            gid=st.st_gid,
            link_target=target,
        )

    def list(self, path: str) -> DirListing:
        full = self.resolve(path)
        entries: list[DirEntry] = []
        truncated = False
        try:
            with os.scandir(full) as scan:
                for entry in scan:
                    if len(entries) >= self._max_entries:
                        truncated = True
                        break
                    entries.append(_dir_entry(entry))
        except OSError as exc:
            raise _translate(exc, full) from exc
        entries.sort(key=lambda e: e.name)
        return DirListing(path=full, entries=entries, truncated=truncated)

    # -- content ---------------------------------------------------------------------------

    def open_read(self, path: str, offset: int, length: int | None) -> tuple[int, Iterator[bytes]]:
        """(bytes that will be sent, chunk iterator) for a byte range of a regular file."""
        full = self.resolve(path)
        if offset < 0 or (length is not None and length < 0):
            raise BadRequest("offset and length must be >= 0", reason="invalid_range")
        try:
            fd = os.open(full, os.O_RDONLY)
        except OSError as exc:
            raise _translate(exc, full) from exc
        size = os.fstat(fd).st_size
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            raise BadRequest(f"{full}: is a directory", reason="is_a_directory")
        count = max(0, size - offset) if length is None else max(0, min(length, size - offset))
        return count, _read_chunks(fd, offset, count)

    async def write(
        self, path: str, chunks: AsyncIterator[bytes], mode: int | None, parents: bool
    ) -> FileStat:
        full = self.resolve(path)
        directory = os.path.dirname(full) or "/"
        try:
            if parents:
                os.makedirs(directory, exist_ok=True)
            if os.path.isdir(full):
                raise IsADirectoryError(full)
            tmp = os.path.join(directory, f".{os.path.basename(full)}.sandman-{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            raise _translate(exc, full) from exc
        try:
            await _write_all(fd, chunks)
            os.fchmod(fd, mode if mode is not None else _default_mode(full))
            os.close(fd)
            fd = -1
            os.rename(tmp, full)
        except BaseException as exc:
            if fd >= 0:
                os.close(fd)
            _unlink_quietly(tmp)
            if isinstance(exc, OSError):
                raise _translate(exc, full) from exc
            raise
        return self.stat(full)

    def remove(self, path: str, recursive: bool) -> None:
        full = self.resolve(path)
        if full == "/":
            raise BadRequest("refusing to remove /", reason="invalid_path")
        try:
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                if recursive:
                    shutil.rmtree(full)
                else:
                    os.rmdir(full)
            else:
                os.unlink(full)
        except OSError as exc:
            raise _translate(exc, full) from exc

    def move(self, request: MoveRequest) -> FileStat:
        src, dst = self.resolve(request.source), self.resolve(request.destination)
        try:
            if not request.overwrite and os.path.lexists(dst):
                raise FileExistsError(dst)
            os.makedirs(os.path.dirname(dst) or "/", exist_ok=True)
            shutil.move(src, dst)
        except OSError as exc:
            raise _translate(exc, src) from exc
        return self.stat(dst)

    # -- tar streams -----------------------------------------------------------------------

    def archive(self, path: str) -> AsyncIterator[bytes]:
        """A tar stream of a directory (or file), produced by a worker thread."""
        full = self.resolve(path)
        if not os.path.lexists(full):
            raise NotFound(f"{full}: no such file or directory", reason="file_not_found")
        return _threaded_tar(full)

    async def extract(self, path: str, chunks: AsyncIterator[bytes]) -> DirListing:
        full = self.resolve(path)
        try:
            os.makedirs(full, exist_ok=True)
        except OSError as exc:
            raise _translate(exc, full) from exc
        loop = asyncio.get_running_loop()
        pipe = _ChunkPipe(loop, chunks)
        try:
            await loop.run_in_executor(None, _extract_stream, pipe, full)
        finally:
            await pipe.aclose()
        return self.list(full)


def _dir_entry(entry: os.DirEntry[str]) -> DirEntry:
    try:
        st = entry.stat(follow_symlinks=False)
        return DirEntry(
            name=entry.name,
            type=_kind(st.st_mode),
            size=st.st_size,
            mode=stat.S_IMODE(st.st_mode),
            mtime=st.st_mtime,
        )
    except OSError:
        return DirEntry(name=entry.name, type="other", size=0, mode=0, mtime=0.0)


def _default_mode(full: str) -> int:
    try:
        return stat.S_IMODE(os.stat(full).st_mode)  # keep an existing file's mode
    except OSError:
        return 0o644


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _read_chunks(fd: int, offset: int, count: int) -> Iterator[bytes]:
    try:
        while count > 0:
            data = os.pread(fd, min(CHUNK, count), offset)
            if not data:
                return
            offset += len(data)
            count -= len(data)
            yield data
    finally:
        os.close(fd)


async def _write_all(fd: int, chunks: AsyncIterator[bytes]) -> None:
    async for chunk in chunks:
        view = memoryview(chunk)
        while view:
            written = os.write(fd, view)
            view = view[written:]


def _extract_stream(pipe: _ChunkPipe, target: str) -> None:
    import tarfile  # tar support is imported on first use: it costs daemon start-up time

    try:
        with tarfile.open(fileobj=cast(IO[bytes], pipe), mode="r|*") as archive:
            archive.extractall(target, filter="data")
    except tarfile.FilterError as exc:
        raise BadRequest(f"unsafe tar member: {exc}", reason="unsafe_archive") from exc
    except (tarfile.TarError, EOFError) as exc:
        raise BadRequest(f"not a valid tar stream: {exc}", reason="invalid_archive") from exc
    except OSError as exc:
        raise _translate(exc, target) from exc


class _ChunkPipe:
    """A blocking file-like view (for ``tarfile`` in a thread) of an async chunk iterator."""

    def __init__(self, loop: asyncio.AbstractEventLoop, chunks: AsyncIterator[bytes]) -> None:
        self._loop = loop
        self._chunks = chunks
        self._buffer = b""
        self._eof = False

    def read(self, size: int = -1) -> bytes:
        while not self._eof and (size < 0 or len(self._buffer) < size):
            future = asyncio.run_coroutine_threadsafe(self._next(), self._loop)
            chunk = future.result()
            if chunk is None:
                self._eof = True
            else:
                self._buffer += chunk
        if size < 0:
            data, self._buffer = self._buffer, b""
        else:
            data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    async def _next(self) -> bytes | None:
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            return None

    async def aclose(self) -> None:
        """Consume whatever the tar reader left unread (the request body must be drained)."""
        async for _ in self._chunks:
            pass


def _threaded_tar(full: str) -> AsyncIterator[bytes]:
    import queue  # imported on first use, like tarfile: start-up time matters more
    import tarfile
    import threading

    chunks: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=8)
    cancelled = threading.Event()

    class _Sink:
        def write(self, data: bytes) -> int:
            if cancelled.is_set():
                raise BrokenPipeError("client went away")
            chunks.put(bytes(data))
            return len(data)

    def produce() -> None:
        try:
            with tarfile.open(fileobj=_Sink(), mode="w|", format=tarfile.PAX_FORMAT) as archive:  # type: ignore[call-overload]
                # A directory's archive holds its contents, so extracting it at X recreates it at X.
                arcname = "." if os.path.isdir(full) else os.path.basename(full)
                archive.add(full, arcname=arcname)
            chunks.put(None)
        except BaseException as exc:
            chunks.put(exc)

    async def consume() -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        worker = loop.run_in_executor(None, produce)
        try:
            while True:
                item = await loop.run_in_executor(None, chunks.get)
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancelled.set()
            while not worker.done():  # unblock a producer waiting on a full queue
                try:
                    chunks.get_nowait()
                except queue.Empty:
                    await asyncio.sleep(0.01)
            await worker

    return consume()
