"""File operations against a real daemon: atomic writes, ranges, tar streams, bad paths."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandman.sdk.daemon_client import DaemonAPIError, SandboxClient
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


async def test_write_read_range_and_mode(client: SandboxClient, tmp_path: Path) -> None:
    target = tmp_path / "deep" / "dir" / "f.txt"
    stat = await client.write_file(str(target), b"hello world", mode=0o600)
    assert (stat.type, stat.size, stat.mode) == ("file", 11, 0o600)
    assert await client.read_file(str(target)) == b"hello world"
    assert await client.read_file(str(target), offset=6, length=3) == b"wor"
    assert await client.read_file(str(target), offset=100) == b""
    await client.write_file(str(target), b"new")
    assert target.read_bytes() == b"new"
    assert oct(target.stat().st_mode & 0o777) == oct(0o600)  # an overwrite keeps the mode
    assert [p.name for p in target.parent.iterdir()] == ["f.txt"]  # no temp files left


async def test_relative_paths_resolve_against_the_workdir(
    client: SandboxClient, tmp_path: Path
) -> None:
    await client.write_file("rel.txt", b"x")  # the test daemon runs in tmp_path
    assert (tmp_path / "rel.txt").read_bytes() == b"x"


async def test_failed_upload_keeps_the_old_content(client: SandboxClient, tmp_path: Path) -> None:
    target = tmp_path / "keep.txt"
    target.write_bytes(b"original")

    async def broken() -> AsyncIterator[bytes]:
        yield b"partial"
        raise RuntimeError("client died mid-upload")

    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever the transport raises
        await client.write_file(str(target), broken())
    assert target.read_bytes() == b"original"
    # the daemon notices the broken upload a moment after the client gave up
    await wait_until_async(lambda: sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"])


async def test_large_file_streams_with_bounded_memory(
    client: SandboxClient, tmp_path: Path
) -> None:
    size = 64 << 20
    before = (await client.info()).usage.daemon_rss_bytes

    async def chunks() -> AsyncIterator[bytes]:
        block = os.urandom(1 << 20)
        for _ in range(size >> 20):
            yield block

    await client.write_file(str(tmp_path / "big.bin"), chunks())
    data = await client.read_file(str(tmp_path / "big.bin"))
    after = (await client.info()).usage.daemon_rss_bytes
    assert len(data) == size
    assert after - before < 24 << 20, f"RSS grew by {(after - before) >> 20} MiB"


async def test_stat_list_move_remove(client: SandboxClient, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_text("a")
    os.symlink("a", tmp_path / "d" / "link")
    listing = await client.list_dir(str(tmp_path / "d"))
    assert [(e.name, e.type) for e in listing.entries] == [("a", "file"), ("link", "symlink")]
    assert (await client.stat(str(tmp_path / "d" / "link"))).link_target == "a"
    await client.write_file(str(tmp_path / "b"), b"b")
    with pytest.raises(DaemonAPIError) as exists:
        await client.move(str(tmp_path / "b"), str(tmp_path / "d" / "a"))
    assert (exists.value.status, exists.value.reason) == (409, "file_exists")
    moved = await client.move(str(tmp_path / "b"), str(tmp_path / "d" / "a"), overwrite=True)
    assert moved.size == 1 and (tmp_path / "d" / "a").read_text() == "b"
    with pytest.raises(DaemonAPIError) as not_empty:
        await client.remove(str(tmp_path / "d"))
    assert (not_empty.value.status, not_empty.value.reason) == (409, "directory_not_empty")
    await client.remove(str(tmp_path / "d"), recursive=True)
    assert not (tmp_path / "d").exists()


async def test_directory_roundtrip_as_tar(client: SandboxClient, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("print('hi')\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    archive = await client.download_dir(str(src))
    listing = await client.upload_dir(str(tmp_path / "dst"), archive)
    assert sorted(e.name for e in listing.entries) == ["pkg", "run.sh"]
    assert (tmp_path / "dst" / "pkg" / "mod.py").read_text() == "print('hi')\n"
    assert (tmp_path / "dst" / "run.sh").stat().st_mode & 0o111


def _tar(members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            archive.addfile(info)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("members", "symlinks"),
    [
        ({"../escaped.txt": b"x"}, None),
        ({"sub/../../escaped.txt": b"x"}, None),
        ({}, {"evil": "/etc"}),
    ],
)
async def test_tar_upload_cannot_escape_its_directory(
    client: SandboxClient,
    tmp_path: Path,
    members: dict[str, bytes],
    symlinks: dict[str, str] | None,
) -> None:
    with pytest.raises(DaemonAPIError) as info:
        await client.upload_dir(str(tmp_path / "dst"), _tar(members, symlinks))
    assert (info.value.status, info.value.reason) == (400, "unsafe_archive")
    assert not (tmp_path / "escaped.txt").exists()


async def test_absolute_tar_members_land_inside_the_target(
    client: SandboxClient, tmp_path: Path
) -> None:
    await client.upload_dir(str(tmp_path / "dst"), _tar({"/abs.txt": b"x"}))
    assert (tmp_path / "dst" / "abs.txt").read_bytes() == b"x"
    assert not Path("/abs.txt").exists()


async def test_garbage_tar_is_a_400(client: SandboxClient, tmp_path: Path) -> None:
    with pytest.raises(DaemonAPIError) as info:
        await client.upload_dir(str(tmp_path / "dst"), b"this is not a tar stream" * 100)
    assert (info.value.status, info.value.reason) == (400, "invalid_archive")


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        ("", 400, "missing_path"),
        ("/no/such/file", 404, "file_not_found"),
        ("/", 400, "is_a_directory"),
        ("/etc/passwd/x", 400, "not_a_directory"),
    ],
)
async def test_bad_read_paths(client: SandboxClient, path: str, status: int, reason: str) -> None:
    with pytest.raises(DaemonAPIError) as info:
        await client.read_file(path)
    assert (info.value.status, info.value.reason) == (status, reason)


@pytest.mark.parametrize("daemon_args", [["--max-upload-bytes", "1000"]])
async def test_upload_cap_is_a_413(client: SandboxClient, tmp_path: Path) -> None:
    with pytest.raises(DaemonAPIError) as info:
        await client.write_file(str(tmp_path / "f"), b"x" * 5000)
    assert (info.value.status, info.value.reason) == (413, "body_too_large")
    assert list(tmp_path.iterdir()) == []
