"""Tar uploads: the daemon checks every member itself, caps what is decompressed, and keeps
nothing of a rejected archive.

The first case is CVE-2025-4517 as it hit the daemon: on the Python in use, a symlink chain
longer than PATH_MAX blinds the ``data`` filter and a member is written outside the target.
The generated cases then build archives from the parts such attacks are made of (links of
every kind, long and dotted names, devices, huge members) and check the invariants: nothing
is ever written outside the target, and an archive is either extracted whole or refused with
a reason and leaves the target as it was.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandman.sdk.daemon_client import DaemonAPIError, SandboxClient

pytestmark = pytest.mark.anyio


class Tar:
    """An archive built member by member (an attacker's order, not a packer's)."""

    def __init__(self) -> None:
        self._buffer = io.BytesIO()
        # closed by bytes(): the builder is its own context
        self._tar = tarfile.open(fileobj=self._buffer, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115

    def file(self, name: str, data: bytes = b"x", mode: int = 0o644) -> Tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        self._tar.addfile(info, io.BytesIO(data))
        return self

    def add(self, name: str, kind: bytes, link: str = "", mode: int = 0o755) -> Tar:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mode = kind, link, mode
        self._tar.addfile(info)
        return self

    def bytes(self) -> bytes:
        self._tar.close()
        return self._buffer.getvalue()


def _tree(root: Path) -> dict[str, tuple[str, bytes | str]]:
    out: dict[str, tuple[str, bytes | str]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir", b"")
            else:
                out[rel] = ("file", path.read_bytes())
    return out


async def _upload_status(client: SandboxClient, target: Path, archive: bytes) -> int:
    try:
        await client.upload_dir(str(target), archive)
    except DaemonAPIError as exc:
        return exc.status
    return 200


async def _refused(client: SandboxClient, target: Path, archive: bytes) -> tuple[int, str]:
    with pytest.raises(DaemonAPIError) as info:
        await client.upload_dir(str(target), archive)
    return info.value.status, info.value.reason


async def test_a_symlink_chain_past_path_max_cannot_write_outside(
    client: SandboxClient, tmp_path: Path
) -> None:
    """CVE-2025-4517: nested symlinked directories make the final link's expansion exceed
    PATH_MAX, so realpath stops checking; a hard link and a file then go through it."""
    target = tmp_path / "dest"
    (tmp_path / "flag").write_text("original")
    steps = "abcdefghijklmnop"
    component = "d" * ((4096 - len(str(target)) - 1) // (len(steps) + 1))
    tar, path = Tar(), ""
    for step in steps:
        tar.add(os.path.join(path, component), tarfile.DIRTYPE)
        tar.add(os.path.join(path, step), tarfile.SYMTYPE, component)
        path = os.path.join(path, component)
    long_link = os.path.join(*steps, "l" * 254)
    tar.add(long_link, tarfile.SYMTYPE, os.path.join(*[".."] * len(steps)))
    tar.add("escape", tarfile.SYMTYPE, os.path.join(long_link, ".."))
    tar.add("flaglink", tarfile.LNKTYPE, "escape/flag")
    tar.file("flaglink", b"overwritten")
    tar.file("escape/newfile", b"new")
    assert await _refused(client, target, tar.bytes()) == (400, "unsafe_archive")
    assert (tmp_path / "flag").read_text() == "original"
    assert not (tmp_path / "newfile").exists()
    assert not target.exists()  # made for the upload, removed with the rejected archive


@pytest.mark.parametrize(
    "archive",
    [
        Tar().add("a", tarfile.SYMTYPE, ".").add("b", tarfile.SYMTYPE, "a/..").bytes(),
        Tar().add("b", tarfile.SYMTYPE, "a/..").add("a", tarfile.SYMTYPE, ".").bytes(),
        Tar().add("up", tarfile.SYMTYPE, "sub/../..").bytes(),
        Tar().add("abs", tarfile.SYMTYPE, "/etc").bytes(),
        Tar().add("in", tarfile.SYMTYPE, "sub").file("in/../../x").bytes(),
        Tar().add("in", tarfile.SYMTYPE, ".").file("in/x").bytes(),
        Tar().add("loop", tarfile.SYMTYPE, "loop/x").add("l2", tarfile.SYMTYPE, "loop").bytes(),
        Tar().add("h", tarfile.LNKTYPE, "../outside").bytes(),
        Tar().add("h", tarfile.LNKTYPE, "/etc/passwd").bytes(),
        Tar().add("dev", tarfile.CHRTYPE).bytes(),
        Tar().add("blk", tarfile.BLKTYPE).bytes(),
        Tar().add("fifo", tarfile.FIFOTYPE).bytes(),
        Tar().file("ok.txt").file("../escaped.txt").bytes(),
    ],
    ids=[
        "link through a link to .",
        "the same, links in the other order",
        "link up past the root",
        "absolute link",
        "file through a link",
        "file through a link inside",
        "link loop",
        "hard link outside",
        "hard link absolute",
        "char device",
        "block device",
        "fifo",
        "dot-dot after a good member",
    ],
)
async def test_unsafe_members_are_refused_and_nothing_is_kept(
    client: SandboxClient, tmp_path: Path, archive: bytes
) -> None:
    target = tmp_path / "dest"
    target.mkdir()
    (target / "existing").write_text("kept")
    assert await _refused(client, target, archive) == (400, "unsafe_archive")
    assert _tree(target) == {"existing": ("file", b"kept")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest"]


@pytest.mark.parametrize("daemon_args", [["--max-extract-bytes", str(50 << 20)]])
async def test_the_decompressed_size_is_capped(client: SandboxClient, tmp_path: Path) -> None:
    bomb = gzip.compress(Tar().file("small.txt").file("zeros", bytes(200 << 20)).bytes(), 9)
    assert len(bomb) < 300_000
    assert await _refused(client, tmp_path / "dest", bomb) == (413, "archive_too_large")
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize("daemon_args", [["--max-archive-members", "10"]])
async def test_the_member_count_is_capped(client: SandboxClient, tmp_path: Path) -> None:
    archive = Tar()
    for i in range(11):
        archive.file(f"f{i}")
    assert await _refused(client, tmp_path / "d", archive.bytes()) == (413, "archive_too_large")


async def test_huge_header_records_are_refused_before_they_are_read(
    client: SandboxClient, tmp_path: Path
) -> None:
    archive = gzip.compress(Tar().file("x" * (4 << 20)).bytes())  # a 4 MiB pax path record
    assert await _refused(client, tmp_path / "d", archive) == (400, "unsafe_archive")


async def test_modes_are_tamed_and_links_inside_are_kept(
    client: SandboxClient, tmp_path: Path
) -> None:
    archive = (
        Tar()
        .file("bin/tool", b"#!/bin/sh\n", mode=0o6777)
        .file("secret", b"s", mode=0o000)
        .add("bin/alias", tarfile.SYMTYPE, "tool")
        .add("up", tarfile.SYMTYPE, "bin/../secret")
        .add("hard", tarfile.LNKTYPE, "secret")
        .add("ro", tarfile.DIRTYPE, mode=0o500)
        .file("ro/inside")
        .bytes()
    )
    await client.upload_dir(str(tmp_path / "d"), archive)
    d = tmp_path / "d"
    assert (d / "bin" / "tool").stat().st_mode & 0o7777 == 0o755
    assert (d / "secret").stat().st_mode & 0o7777 == 0o600
    assert os.readlink(d / "bin" / "alias") == "tool"
    assert (d / "hard").stat().st_ino == (d / "secret").stat().st_ino
    assert (d / "ro").stat().st_mode & 0o777 == 0o700
    assert (d / "ro" / "inside").exists()
    assert not any(p.name.startswith(".sandman-upload-") for p in d.iterdir())


async def test_an_upload_merges_into_an_existing_tree_or_refuses_a_conflict(
    client: SandboxClient, tmp_path: Path
) -> None:
    d = tmp_path / "d"
    (d / "keep").mkdir(parents=True)
    (d / "keep" / "old").write_text("old")
    (d / "replace").write_text("before")
    await client.upload_dir(str(d), Tar().file("keep/new", b"n").file("replace", b"after").bytes())
    assert _tree(d) == {
        "keep": ("dir", b""),
        "keep/old": ("file", b"old"),
        "keep/new": ("file", b"n"),
        "replace": ("file", b"after"),
    }
    conflicting = Tar().file("fresh", b"f").add("replace", tarfile.DIRTYPE).bytes()
    assert await _refused(client, d, conflicting) == (409, "archive_conflict")
    assert not (d / "fresh").exists()  # all or nothing: the good member was not moved in


NAMES = st.lists(
    st.sampled_from(["a", "b", "sub", ".", "..", "", "x" * 200, "é", "\udcff"]),
    min_size=1,
    max_size=4,
).map("/".join)
MEMBERS = st.lists(
    st.tuples(
        st.sampled_from(["file", "dir", "symlink", "hardlink", "fifo", "chrdev", "big"]),
        NAMES,
        NAMES | st.sampled_from(["/", "/etc", "../..", ""]),
        st.integers(0, 0o7777),
    ),
    min_size=1,
    max_size=8,
)


def _build(members: list[tuple[str, str, str, int]], compress: bool) -> bytes:
    tar = Tar()
    kinds = {
        "dir": tarfile.DIRTYPE,
        "symlink": tarfile.SYMTYPE,
        "hardlink": tarfile.LNKTYPE,
        "fifo": tarfile.FIFOTYPE,
        "chrdev": tarfile.CHRTYPE,
    }
    for kind, name, link, mode in members:
        if kind == "file":
            tar.file(name or "f", b"data", mode)
        elif kind == "big":
            tar.file(name or "f", bytes(3 << 20), mode)  # past the test daemon's 2 MiB cap
        else:
            tar.add(name or "n", kinds[kind], link, mode)
    data = tar.bytes()
    return gzip.compress(data, 1) if compress else data


@pytest.mark.parametrize("daemon_args", [["--max-extract-bytes", str(2 << 20)]])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(members=MEMBERS, compress=st.booleans())
async def test_any_archive_lands_whole_inside_or_is_refused_leaving_nothing(
    client: SandboxClient, tmp_path: Path, members: list[tuple[str, str, str, int]], compress: bool
) -> None:
    base = tmp_path / os.urandom(4).hex()
    target = base / "target"
    target.mkdir(parents=True)
    (target / "existing").write_text("kept")
    before = _tree(base)
    status = await _upload_status(client, target, _build(members, compress))
    if status != 200:
        assert status in (400, 409, 413)
        assert _tree(base) == before  # nothing kept, nothing outside
        return
    after = _tree(base)
    assert all(name.startswith("target") for name in after)
    assert after["target/existing"] == ("file", b"kept") or "existing" in {
        n.split("/")[0] for _, n, _, _ in members
    }
    for directory, dirs, files in os.walk(target):
        for name in dirs + files:
            path = Path(directory, name)
            if path.is_symlink():
                resolved = os.path.realpath(path)
                assert resolved == str(target) or resolved.startswith(f"{target}/"), path
            elif not path.is_dir():
                assert path.lstat().st_mode & 0o7022 == 0, path
