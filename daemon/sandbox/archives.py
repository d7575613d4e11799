"""Tar streams over HTTP: an upload extracted as it arrives, a download produced as it is sent.

``tarfile`` is blocking, so both run in a worker thread, bridged to the event loop: an upload
reads the request body through ``_ChunkPipe`` (a file-like view of the async chunk
iterator), a download writes into a bounded queue the response drains. What is extracted and
how it is checked is ``untar.py``'s business; this module maps its outcomes to the API's
errors. It imports ``tarfile``, so it is itself imported on first use (start-up time).
"""

from __future__ import annotations

import asyncio
import os
import tarfile
from collections.abc import AsyncIterator
from typing import IO, cast

from sandman.wire.errors import Reason

from .errors import DaemonError
from .settings import ExtractLimits
from .trees import walk_tree
from .untar import ArchiveConflict, ArchiveTooLarge, UnsafeArchive, extract

__all__ = ["extract_upload", "tar_stream"]


async def extract_upload(chunks: AsyncIterator[bytes], target: str, limits: ExtractLimits) -> None:
    """Extract the tar stream ``chunks`` into the existing directory ``target``."""
    loop = asyncio.get_running_loop()
    pipe = _ChunkPipe(loop, chunks)
    await loop.run_in_executor(None, _extract, pipe, target, limits)
    await pipe.drain()  # the zero blocks after the last member: keep the connection usable


def _extract(pipe: _ChunkPipe, target: str, limits: ExtractLimits) -> None:
    try:
        extract(cast(IO[bytes], pipe), target, limits)
    except UnsafeArchive as exc:
        raise DaemonError(f"unsafe tar member: {exc}", reason=Reason.UNSAFE_ARCHIVE) from exc
    except ArchiveTooLarge as exc:
        raise DaemonError(f"archive too large: {exc}", reason=Reason.ARCHIVE_TOO_LARGE) from exc
    except ArchiveConflict as exc:
        raise DaemonError(
            f"archive conflicts with the target: {exc}", reason=Reason.ARCHIVE_CONFLICT
        ) from exc
    except DaemonError:
        raise  # from reading the request body (too large, timed out, cut short)
    except (tarfile.TarError, EOFError, UnicodeError) as exc:
        raise DaemonError(f"not a valid tar stream: {exc}", reason=Reason.INVALID_ARCHIVE) from exc


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

    async def drain(self) -> None:
        """Consume what the tar reader left unread of a body it accepted."""
        async for _ in self._chunks:
            pass


def tar_stream(full: str) -> AsyncIterator[bytes]:
    import queue  # imported on first use: start-up time matters
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
                _add_tree(archive, full)
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


def _add_tree(archive: tarfile.TarFile, top: str) -> None:
    """Add ``top`` (a directory's contents, so extracting at X recreates it at X), without
    recursion, on one file system. Once the response has started an error can only cut it
    short, so what vanished or cannot be read meanwhile is left out, and a file that shrank
    or grew while read is sent as long as it was when its header went out."""
    base = "." if os.path.isdir(top) else os.path.basename(top)
    for path, rel, _ in walk_tree(top):
        arcname = f"{base}/{rel}" if rel else base
        try:
            info = archive.gettarinfo(path, arcname)
        except OSError:
            continue
        if info is None:  # a socket: tar has no such member
            continue
        if not info.isreg():
            archive.addfile(info)
            continue
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed below, after addfile
        except OSError:
            continue
        with handle:
            archive.addfile(info, _Exactly(handle, info.size))


class _Exactly:
    """``size`` bytes of ``source``: cut past it, zero-padded below it, read errors as zeros."""

    def __init__(self, source: IO[bytes], size: int) -> None:
        self._source, self._left = source, size

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        try:
            data = self._source.read(n)
        except OSError:
            data = b""
        data = data + bytes(n - len(data))
        self._left -= len(data)
        return data
