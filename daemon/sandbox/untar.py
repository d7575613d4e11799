"""Safe extraction of an uploaded tar stream: every member checked by the daemon itself, all or
nothing.

Python's ``data`` extraction filter is not enough on its own: on the interpreters we ship
with, a chain of symlinks longer than PATH_MAX makes its ``os.path.realpath`` check stop
resolving, and a member written *through* such a link lands outside the target
(CVE-2025-4517). So the daemon does not let ``tarfile`` extract anything; it only parses,
and this module decides and writes:

- Names: a leading ``/`` is dropped (absolute members land inside the target), ``.``
  segments are ignored, and a ``..`` segment, a name past PATH_MAX or deeper than
  ``MAX_DEPTH`` is refused.
- Writes never follow a link: every member is written by walking its parent directories
  one ``openat(O_NOFOLLOW | O_DIRECTORY)`` at a time from the staging directory, so a member
  whose path crosses a symlink (or a file) is refused, whatever the links say.
- Links: a symlink's target must be relative, and once the whole archive is in place every
  symlink is resolved physically inside the staging tree (links followed, at most
  ``MAX_LINK_HOPS``): one that leaves the tree is refused. A hard link must name a regular
  file the archive already wrote (reached the same no-follow way).
- Types: regular files, directories, symlinks and hard links; devices, FIFOs, sparse and
  unknown members are refused. Modes keep the permission bits only, without setuid, setgid,
  sticky, or write for group and others, and always with the owner's read/write (and
  search, for directories): ``(mode & 0o755) | 0o600``. Owners are not changed.
- Sizes: the members' data is counted as it is *decompressed* against ``max_bytes`` (a
  200 KB gzip can hold 200 MiB), members are counted against ``max_members``, and the
  metadata records ``tarfile`` would read whole into memory (pax headers, GNU long names)
  are refused past ``MAX_META_BYTES`` before they are read.
- All or nothing: the archive is extracted into a fresh staging directory *inside* the
  target (so on its file system), and moved into place, entry by entry with ``rename``,
  only once every member passed and no staged entry conflicts with an existing one (a
  directory where a file is, or the reverse: 409). A rejected archive leaves nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from typing import IO

from .settings import ExtractLimits
from .trees import remove_tree

__all__ = [
    "ArchiveConflict",
    "ArchiveError",
    "ArchiveTooLarge",
    "UnsafeArchive",
    "extract",
]

PATH_MAX = 4096
MAX_DEPTH = 256
MAX_LINK_HOPS = 40  # the kernel's own limit for one path resolution
MAX_META_BYTES = 1 << 20
COPY_CHUNK = 64 * 1024
STAGING_PREFIX = ".sandman-upload-"
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_META_TYPES = {
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
}


class ArchiveError(Exception):
    """The archive cannot be extracted; nothing of it was kept."""


class UnsafeArchive(ArchiveError):
    """A member would escape the target, or is of a kind that is never extracted."""


class ArchiveTooLarge(ArchiveError):
    """Past the decompressed-size or member-count cap."""


class ArchiveConflict(ArchiveError):
    """A staged entry and an existing one disagree on being a directory."""


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses a metadata record too large to read into memory, before tarfile reads it."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _META_TYPES and self.size > MAX_META_BYTES:
            raise UnsafeArchive(f"a {self.size}-byte header record (cap {MAX_META_BYTES})")
        return super()._proc_member(tarfile_)  # type: ignore[misc]


def extract(source: IO[bytes], target: str, limits: ExtractLimits) -> None:
    """Extract the tar stream ``source`` (plain or compressed) into the directory ``target``.

    Raises an ``ArchiveError``, ``tarfile.TarError``/``EOFError`` (not a tar stream) or
    ``OSError``; in every case the target is as it was."""
    staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target)
    try:
        room = PATH_MAX - 1 - len(os.fsencode(staging)) - 1
        root = os.open(staging, _NOFOLLOW_DIR)
        try:
            _extract_members(source, root, limits, room)
        finally:
            os.close(root)
        _check_symlinks(staging)
        _check_merge(staging, target)
        _merge(staging, target)
    finally:
        with contextlib.suppress(OSError):
            remove_tree(staging)


def _extract_members(source: IO[bytes], root: int, limits: ExtractLimits, room: int) -> None:
    total = members = 0
    with tarfile.open(fileobj=source, mode="r|*", tarinfo=_BoundedTarInfo) as archive:
        for member in archive:
            members += 1
            if members > limits.max_members:
                raise ArchiveTooLarge(f"more than {limits.max_members} members")
            parts = _parts(member.name, room)
            if member.isreg():
                if member.sparse is not None:
                    raise UnsafeArchive(f"{member.name}: sparse members are not extracted")
                total += member.size
                if total > limits.max_bytes:
                    raise ArchiveTooLarge(f"more than {limits.max_bytes} bytes decompressed")
                data = archive.extractfile(member)
                assert data is not None
                _write_file(root, parts, data, member)
            elif member.isdir():
                if parts:
                    _make_dir(root, parts, member.mode)
            elif member.issym():
                _make_symlink(root, parts, member.linkname, room)
            elif member.islnk():
                _make_hardlink(root, parts, _parts(member.linkname, room))
            else:
                raise UnsafeArchive(
                    f"{member.name}: devices, FIFOs and unknown members are refused"
                )


def _parts(name: str, room: int) -> list[str]:
    """A member name as path segments inside the target (absolute names made relative)."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"{name!r}: '..' segments are refused")
    if "\0" in name:
        raise UnsafeArchive(f"{name!r}: NUL in a member name")
    if parts and parts[0].startswith(STAGING_PREFIX):
        raise UnsafeArchive(f"{name!r}: the name is reserved for the daemon's staging")
    if len(parts) > MAX_DEPTH:
        raise UnsafeArchive(f"{name[:64]!r}...: deeper than {MAX_DEPTH} directories")
    if len(os.fsencode("/".join(parts))) > room:
        raise UnsafeArchive(f"{name[:64]!r}...: the name does not fit in PATH_MAX here")
    return parts


def _mode(mode: int, directory: bool) -> int:
    return (mode & 0o755) | (0o700 if directory else 0o600)


@contextlib.contextmanager
def _parent(root: int, parts: list[str], create: bool) -> Iterator[int]:
    """A descriptor of the directory holding ``parts[-1]``, never following a link."""
    fd = os.dup(root)
    try:
        for part in parts[:-1]:
            child = _open_dir(fd, part, create)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_dir(fd: int, part: str, create: bool) -> int:
    """Open directory ``part`` under ``fd`` (made if missing and ``create``); a symlink or a
    file there is refused: nothing is ever written through a link."""
    try:
        try:
            return os.open(part, _NOFOLLOW_DIR, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(part, 0o700, dir_fd=fd)
            return os.open(part, _NOFOLLOW_DIR, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            raise UnsafeArchive(f"{part!r}: a member path crosses a symlink or a file") from exc
        raise


def _clear(parent: int, name: str) -> None:
    """Make room for a new entry ``name`` (a later member replaces an earlier one)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise UnsafeArchive(f"{name!r}: a member replaces a directory")
    os.unlink(name, dir_fd=parent)


def _write_file(root: int, parts: list[str], data: IO[bytes], member: tarfile.TarInfo) -> None:
    if not parts:
        raise UnsafeArchive("a file member without a name")
    with _parent(root, parts, create=True) as parent:
        _clear(parent, parts[-1])
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, 0o600, dir_fd=parent)
        try:
            while chunk := data.read(COPY_CHUNK):
                os.write(fd, chunk)
            os.fchmod(fd, _mode(member.mode, directory=False))
            if 0 <= member.mtime < 2**40:
                os.utime(fd, (member.mtime, member.mtime))
        finally:
            os.close(fd)


def _make_dir(root: int, parts: list[str], mode: int) -> None:
    with _parent(root, parts, create=True) as parent:
        fd = _open_dir(parent, parts[-1], create=True)
        try:
            os.fchmod(fd, _mode(mode, directory=True))
        finally:
            os.close(fd)


def _make_symlink(root: int, parts: list[str], target: str, room: int) -> None:
    if not parts or not target or os.path.isabs(target) or "\0" in target:
        raise UnsafeArchive(f"symlink {'/'.join(parts)!r} -> {target!r}: empty or absolute")
    if len(os.fsencode(target)) > room:
        raise UnsafeArchive(f"symlink {'/'.join(parts)!r}: target too long")
    with _parent(root, parts, create=True) as parent:
        _clear(parent, parts[-1])
        os.symlink(target, parts[-1], dir_fd=parent)


def _make_hardlink(root: int, parts: list[str], source: list[str]) -> None:
    if not parts or not source:
        raise UnsafeArchive("a hard link without a name or a target")
    try:
        with _parent(root, source, create=False) as src_parent:
            st = os.stat(source[-1], dir_fd=src_parent, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeArchive(f"hard link to {'/'.join(source)!r}: not a regular file")
            with _parent(root, parts, create=True) as parent:
                _clear(parent, parts[-1])
                os.link(
                    source[-1],
                    parts[-1],
                    src_dir_fd=src_parent,
                    dst_dir_fd=parent,
                    follow_symlinks=False,
                )
    except FileNotFoundError as exc:
        raise UnsafeArchive(
            f"hard link to {'/'.join(source)!r}: not a file of this archive"
        ) from exc


def _check_symlinks(staging: str) -> None:
    """Every symlink of the staged tree, resolved physically, stays inside it."""
    for directory, dirs, files in os.walk(staging):
        for name in dirs + files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                where = os.path.relpath(directory, staging)
                start = [] if where == "." else where.split("/")
                if _escapes(staging, start, os.readlink(path)):
                    rel = os.path.relpath(path, staging)
                    raise UnsafeArchive(f"symlink {rel!r} points outside the target")


def _escapes(staging: str, start: list[str], target: str) -> bool:
    """Resolve ``target`` from directory ``start`` (segments under ``staging``), following
    the staged links; True if the resolution leaves the tree or needs too many links."""
    position = list(start)  # real directories only, so joining them follows no link
    pending = list(reversed(target.split("/")))
    hops = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not position:
                return True
            position.pop()
            continue
        here = os.path.join(staging, *position, part)
        try:
            st = os.lstat(here)
        except OSError:  # dangling from here on: what follows stays lexical
            position.append(part)
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            link = os.readlink(here)
            if hops > MAX_LINK_HOPS or os.path.isabs(link):
                return True
            pending.extend(reversed(link.split("/")))
        else:
            position.append(part)
    return False


def _check_merge(staging: str, target: str) -> None:
    """Refuse before moving anything if a staged entry cannot replace its counterpart."""
    for directory, dirs, files in os.walk(staging):
        rel = os.path.relpath(directory, staging)
        for name in dirs + files:
            staged = os.path.join(directory, name)
            existing = os.path.normpath(os.path.join(target, rel, name))
            try:
                existing_st = os.lstat(existing)
            except FileNotFoundError:
                continue
            staged_dir = stat.S_ISDIR(os.lstat(staged).st_mode)
            if staged_dir != stat.S_ISDIR(existing_st.st_mode):
                what = "a directory" if staged_dir else "a file"
                raise ArchiveConflict(f"{os.path.join(rel, name)!r}: the archive has {what} there")


def _merge(staging: str, target: str) -> None:
    """Move the staged entries into place: new entries (whole subtrees) by one rename each,
    existing directories merged, existing non-directories replaced (atomically)."""
    stack = [""]
    while stack:
        rel = stack.pop()
        for name in os.listdir(os.path.join(staging, rel)):
            staged = os.path.join(staging, rel, name)
            existing = os.path.join(target, rel, name)
            both_dirs = all(os.path.isdir(p) and not os.path.islink(p) for p in (existing, staged))
            if both_dirs:
                stack.append(os.path.join(rel, name))
                continue
            os.replace(staged, existing)
