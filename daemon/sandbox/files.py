"""File operations inside the sandbox: streamed reads and atomic writes, stat, list, remove,
move, and directory upload/download as tar streams.

Everything streams in bounded chunks, so a multi-GiB file never sits in the daemon's memory.
Writes are atomic (a temporary file in the target directory, then ``rename``), so a reader
never sees half a file and a failed upload leaves the old content in place.

Paths: relative paths resolve against the daemon's working directory. The daemon runs with the
task's privileges and the agent already has a shell, so paths are not a security boundary;
what must hold is that the daemon itself survives anything (NUL bytes, missing parents,
directories where files are expected, names that are not UTF-8, paths past ``PATH_MAX``: each
is a 4xx with a reason), that ``/`` is never removed however it is spelt (``//`` is a
distinct spelling to ``normpath``), and that a tar upload never writes outside its target
directory (``archives.py``).

Names are bytes on Linux. A query's path arrives percent-decoded with the bytes that are not
UTF-8 kept as surrogate escapes (``http_connection.parse_query``), which ``os`` functions turn
back into the same bytes; answers carry such names base64-encoded with ``*_encoding: "base64"``.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import shutil
import stat
from collections.abc import AsyncIterator, Iterator
from typing import Literal

from sandman.wire.daemon import DirEntry, DirListing, Encoding, FileStat, MoveRequest
from sandman.wire.errors import Reason

from .errors import DaemonError
from .settings import ExtractLimits
from .trees import make_dirs, remove_tree

__all__ = ["FileChunks", "FileService", "name_text"]

CHUNK = 64 * 1024
PATH_MAX = 4096  # bytes, with the terminating NUL (linux/limits.h)
FileType = Literal["file", "directory", "symlink", "other"]


def _kind(mode: int) -> FileType:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


# OSError subclass, else errno -> (reason, what to say) for conditions a caller can cause or
# must learn of; the reason's status is the table's (sandman.wire.errors).
_OS_ERRORS: tuple[tuple[type[OSError], Reason, str], ...] = (
    (FileNotFoundError, Reason.FILE_NOT_FOUND, "no such file or directory"),
    (IsADirectoryError, Reason.IS_A_DIRECTORY, "is a directory"),
    (NotADirectoryError, Reason.NOT_A_DIRECTORY, "not a directory"),
    (FileExistsError, Reason.FILE_EXISTS, "already exists"),
    (PermissionError, Reason.PERMISSION_DENIED, "permission denied"),
)
_ERRNO_ERRORS = {
    errno.ENAMETOOLONG: (Reason.PATH_TOO_LONG, "name or path too long"),
    errno.ELOOP: (Reason.TOO_MANY_LINKS, "too many levels of symbolic links"),
    errno.EINVAL: (Reason.INVALID_PATH, "invalid argument for this path"),
    errno.EXDEV: (Reason.CROSS_DEVICE, "not on the same file system"),
    errno.EROFS: (Reason.READ_ONLY_FILE_SYSTEM, "read-only file system"),
    errno.ENOTEMPTY: (Reason.DIRECTORY_NOT_EMPTY, "directory not empty"),
    errno.EBUSY: (Reason.BUSY, "busy (a mount point or in use)"),
    errno.ETXTBSY: (Reason.BUSY, "text file busy"),
    errno.EMLINK: (Reason.TOO_MANY_LINKS, "too many links"),
    errno.ENOSPC: (Reason.NO_SPACE, "no space left on the device"),
    errno.EDQUOT: (Reason.NO_SPACE, "disk quota exceeded"),
}


def _translate(exc: OSError, path: str) -> DaemonError:
    """Map an OSError to the API's error with a stable reason, keeping the cause."""
    by_type = ((r, w) for cls, r, w in _OS_ERRORS if isinstance(exc, cls))
    reason, what = next(by_type, None) or _ERRNO_ERRORS.get(exc.errno or 0, (Reason.IO_ERROR, ""))
    err = DaemonError(f"{path}: {what or exc.strerror or exc}", reason=reason)
    err.__cause__ = exc
    return err


def name_text(name: str) -> tuple[str, Encoding]:
    """A file name for JSON: itself if its bytes are UTF-8, else the base64 of its bytes."""
    raw = os.fsencode(name)
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


def _paths_text(*paths: str | None) -> tuple[list[str | None], Encoding]:
    """Several paths of one answer under one encoding: base64 for all if one needs it."""
    raws = [os.fsencode(p) if p is not None else None for p in paths]
    try:
        return [r.decode("utf-8") if r is not None else None for r in raws], "utf-8"
    except UnicodeDecodeError:
        return [base64.b64encode(r).decode("ascii") if r is not None else None for r in raws], (
            "base64"
        )


def _decode_path(text: str, encoding: Encoding) -> str:
    if encoding == "utf-8":
        return text
    try:
        return os.fsdecode(base64.b64decode(text, validate=True))
    except ValueError as exc:  # binascii.Error, or text that is not even ASCII
        raise DaemonError(f"path is not valid base64: {exc}", reason=Reason.INVALID_BASE64) from exc


class FileService:
    def __init__(self, workdir: str | None, max_entries: int) -> None:
        self._workdir = workdir
        self._max_entries = max_entries

    def resolve(self, path: str | None) -> str:
        """The absolute, normalised path (``//x`` is ``/x``); 400 for what no call could use."""
        if not path:
            raise DaemonError("query parameter 'path' is required", reason=Reason.MISSING_PATH)
        if "\0" in path:
            raise DaemonError("NUL byte in path", reason=Reason.INVALID_PATH)
        base = self._workdir or os.getcwd()
        full = "/" + os.path.normpath(os.path.join(base, path)).lstrip("/")
        if len(os.fsencode(full)) >= PATH_MAX:
            raise DaemonError(
                f"path of {len(os.fsencode(full))} bytes exceeds PATH_MAX",
                reason=Reason.PATH_TOO_LONG,
            )
        return full

    # -- metadata --------------------------------------------------------------------------

    def stat(self, path: str) -> FileStat:
        full = self.resolve(path)
        try:
            st = os.lstat(full)
            target = os.readlink(full) if stat.S_ISLNK(st.st_mode) else None
        except OSError as exc:
            raise _translate(exc, full) from exc
        (path_text, target_text), encoding = _paths_text(full, target)
        return FileStat(
            path=path_text or "",
            type=_kind(st.st_mode),
            size=st.st_size,
            mode=stat.S_IMODE(st.st_mode),
            mtime=st.st_mtime,
            uid=st.st_uid,
            gid=st.st_gid,
            link_target=target_text,
            path_encoding=encoding,
        )

    def list(self, path: str) -> DirListing:
        full = self.resolve(path)
        entries: list[tuple[bytes, DirEntry]] = []  # sorted by the names' bytes
        truncated = False
        try:
            with os.scandir(full) as scan:
                for entry in scan:
                    if len(entries) >= self._max_entries:
                        truncated = True
                        break
                    entries.append((os.fsencode(entry.name), _dir_entry(entry)))
        except OSError as exc:
            raise _translate(exc, full) from exc
        entries.sort(key=lambda e: e[0])
        path_text, encoding = name_text(full)
        return DirListing(
            path=path_text,
            entries=[entry for _, entry in entries],
            truncated=truncated,
            path_encoding=encoding,
        )

    # -- content ---------------------------------------------------------------------------

    def open_read(self, path: str, offset: int, length: int | None) -> tuple[int, FileChunks]:
        """(bytes that will be sent, chunk iterator) for a byte range of a regular file."""
        full = self.resolve(path)
        if offset < 0 or (length is not None and length < 0):
            raise DaemonError("offset and length must be >= 0", reason=Reason.INVALID_RANGE)
        try:  # non-blocking: opening a FIFO must not hang the daemon
            fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise _translate(exc, full) from exc
        st = os.fstat(fd)
        size = st.st_size
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                raise DaemonError(f"{full}: is a directory", reason=Reason.IS_A_DIRECTORY)
            raise DaemonError(f"{full}: not a regular file", reason=Reason.NOT_A_REGULAR_FILE)
        count = max(0, size - offset) if length is None else max(0, min(length, size - offset))
        return count, FileChunks(fd, offset, count)

    async def write(
        self, path: str, chunks: AsyncIterator[bytes], mode: int | None, parents: bool
    ) -> FileStat:
        full = self.resolve(path)
        directory = os.path.dirname(full) or "/"
        try:
            if parents:
                make_dirs(directory)
            if os.path.isdir(full):
                raise IsADirectoryError(full)
            # A short name: the target's own name may already be near NAME_MAX.
            tmp = os.path.join(directory, f".sandman-{os.getpid()}-{os.urandom(4).hex()}.tmp")
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
            raise DaemonError("refusing to remove /", reason=Reason.INVALID_PATH)
        try:
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                if recursive:
                    remove_tree(full)
                else:
                    os.rmdir(full)
            else:
                os.unlink(full)
        except OSError as exc:
            raise _translate(exc, full) from exc

    def move(self, request: MoveRequest) -> FileStat:
        src = self.resolve(_decode_path(request.source, request.encoding))
        dst = self.resolve(_decode_path(request.destination, request.encoding))
        if src == "/" or dst == "/":
            raise DaemonError("refusing to move / or onto /", reason=Reason.INVALID_PATH)
        if dst.startswith(src.rstrip("/") + "/"):
            raise DaemonError(f"cannot move {src} into itself", reason=Reason.INVALID_PATH)
        try:
            if not request.overwrite and os.path.lexists(dst):
                raise FileExistsError(dst)
            make_dirs(os.path.dirname(dst) or "/")
            shutil.move(src, dst)
        except shutil.Error as exc:  # an OSError without errno, e.g. "destination exists"
            raise DaemonError(
                f"cannot move {src} to {dst}: {exc}", reason=Reason.FILE_EXISTS
            ) from exc
        except OSError as exc:
            raise _translate(exc, src) from exc
        return self.stat(dst)

    # -- tar streams -----------------------------------------------------------------------

    def archive(self, path: str) -> AsyncIterator[bytes]:
        """A tar stream of a directory (or file), produced by a worker thread."""
        full = self.resolve(path)
        if not os.path.lexists(full):
            raise DaemonError(f"{full}: no such file or directory", reason=Reason.FILE_NOT_FOUND)
        from .archives import tar_stream  # imports tarfile: on first use

        return tar_stream(full)

    async def extract(
        self, path: str, chunks: AsyncIterator[bytes], limits: ExtractLimits
    ) -> DirListing:
        """Extract a tar stream into directory ``path`` (made if missing): all or nothing."""
        from .archives import extract_upload  # imports tarfile: on first use

        full = self.resolve(path)
        created = not os.path.lexists(full)
        try:
            make_dirs(full)
            await extract_upload(chunks, full, limits)
        except BaseException as exc:
            if created:
                with contextlib.suppress(OSError):
                    os.rmdir(full)  # a rejected archive leaves no trace, not even its target
            if isinstance(exc, OSError):
                raise _translate(exc, full) from exc
            raise
        return self.list(full)


def _dir_entry(entry: os.DirEntry[str]) -> DirEntry:
    name, encoding = name_text(entry.name)
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return DirEntry(name=name, type="other", size=0, mode=0, mtime=0.0, name_encoding=encoding)
    return DirEntry(
        name=name,
        type=_kind(st.st_mode),
        size=st.st_size,
        mode=stat.S_IMODE(st.st_mode),
        mtime=st.st_mtime,
        name_encoding=encoding,
    )


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


class FileChunks:
    """A byte range of an open file as chunks; owns the descriptor, which ``close`` (run by
    the response on every path, iterated or not) releases once."""

    def __init__(self, fd: int, offset: int, count: int) -> None:
        self._fd, self._offset, self._count = fd, offset, count

    def __iter__(self) -> Iterator[bytes]:
        while self._count > 0 and self._fd >= 0:
            data = os.pread(self._fd, min(CHUNK, self._count), self._offset)
            if not data:
                return
            self._offset += len(data)
            self._count -= len(data)
            yield data

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


async def _write_all(fd: int, chunks: AsyncIterator[bytes]) -> None:
    async for chunk in chunks:
        view = memoryview(chunk)
        while view:
            written = os.write(fd, view)
            view = view[written:]
