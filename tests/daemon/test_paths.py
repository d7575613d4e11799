"""File paths at the edges: the root guard, names that are not UTF-8, modes, long paths.

A path in a query is percent-encoded *bytes* (UTF-8 for text, ``%FF`` for any other byte), so
every name the file system can hold can be addressed; in JSON answers a name that is not
valid UTF-8 is sent base64-encoded with ``*_encoding: "base64"`` (the ``Blob`` rule), so
listings are lossless. Each case here was a 500 or a silent misbehaviour before.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from urllib.parse import quote_from_bytes

import aiohttp
import pytest
from yarl import URL

from tests.support.daemon import DaemonProcess

pytestmark = pytest.mark.anyio

ODD = b"caf\xe9-\xff\xfe.txt"  # latin-1 bytes: not UTF-8


async def _call(
    daemon: DaemonProcess,
    method: str,
    endpoint: str,
    path: bytes | None = None,
    extra: str = "",
    data: bytes | None = None,
) -> tuple[int, dict]:
    query = f"path={quote_from_bytes(path, safe='/')}" if path is not None else ""
    url = URL(f"{daemon.url}{endpoint}?{query}{extra}", encoded=True)
    headers = {"Authorization": f"Bearer {daemon.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=data, headers=headers) as r,
    ):
        raw = await r.read()
        try:
            return r.status, json.loads(raw) if raw else {}
        except ValueError:
            return r.status, {"raw": raw}


def _reason(payload: dict) -> str:
    return payload.get("error", {}).get("reason", "")


@pytest.mark.parametrize("path", [b"/", b"//", b"///", b"/./", b"//.", b"/tmp/..", b"/tmp/../"])
async def test_the_root_can_never_be_removed(daemon: DaemonProcess, path: bytes) -> None:
    # (not recursive: were the guard missing, rmdir of a non-empty / still fails harmlessly)
    status, payload = await _call(daemon, "DELETE", "/v1/files", path)
    assert (status, _reason(payload)) == (400, "invalid_path"), payload


async def test_non_utf8_names_are_listed_losslessly_and_addressable(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    directory = os.fsencode(tmp_path)
    with open(os.path.join(directory, ODD), "wb") as handle:
        handle.write(b"odd")
    status, listing = await _call(daemon, "GET", "/v1/files/list", directory)
    assert status == 200, listing
    (entry,) = listing["entries"]
    assert entry["name_encoding"] == "base64"
    name = base64.b64decode(entry["name"])
    assert name == ODD
    full = os.path.join(directory, name)
    status, stat = await _call(daemon, "GET", "/v1/files/stat", full)
    assert (status, stat["path_encoding"], stat["size"]) == (200, "base64", 3), stat
    assert base64.b64decode(stat["path"]) == full
    status, _ = await _call(daemon, "PUT", "/v1/files", full + b".copy", data=b"copy")
    assert status == 200
    assert Path(os.fsdecode(full + b".copy")).read_bytes() == b"copy"
    status, _ = await _call(daemon, "DELETE", "/v1/files", full)
    assert status == 204
    assert not os.path.lexists(full)


async def test_move_accepts_base64_paths(daemon: DaemonProcess, tmp_path: Path) -> None:
    source = os.path.join(os.fsencode(tmp_path), ODD)
    with open(source, "wb") as handle:
        handle.write(b"x")
    body = {
        "source": base64.b64encode(source).decode(),
        "destination": base64.b64encode(source + b".moved").decode(),
        "encoding": "base64",
    }
    headers = {"Authorization": f"Bearer {daemon.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(daemon.url + "/v1/files/move", json=body, headers=headers) as r,
    ):
        assert r.status == 200, await r.text()
        assert base64.b64decode((await r.json())["path"]) == source + b".moved"
    assert os.path.exists(source + b".moved")


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("77777", "invalid_mode"),
        ("-1", "invalid_mode"),
        ("8", "invalid_query"),
        ("0x1", "invalid_query"),
    ],
)
async def test_modes_out_of_range_are_400s(
    daemon: DaemonProcess, tmp_path: Path, mode: str, reason: str
) -> None:
    target = os.fsencode(tmp_path / "f")
    status, payload = await _call(daemon, "PUT", "/v1/files", target, f"&mode={mode}", b"x")
    assert (status, _reason(payload)) == (400, reason), payload
    assert not os.path.exists(target)


@pytest.mark.parametrize(
    "path",
    [b"/tmp/" + b"x" * 5000, b"/tmp/" + b"y" * 300, b"/tmp/" + b"d/" * 2100],
    ids=["long path", "long name", "deep path"],
)
@pytest.mark.parametrize(
    ("method", "endpoint"),
    [
        ("GET", "/v1/files"),
        ("PUT", "/v1/files"),
        ("GET", "/v1/files/stat"),
        ("GET", "/v1/files/list"),
        ("DELETE", "/v1/files"),
    ],
)
async def test_over_long_paths_are_400s(
    daemon: DaemonProcess, method: str, endpoint: str, path: bytes
) -> None:
    status, payload = await _call(
        daemon, method, endpoint, path, data=b"x" if method == "PUT" else None
    )
    assert (status, _reason(payload)) == (400, "path_too_long"), payload


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ("&offset=99999999999999999999999", "invalid_query"),
        ("&length=-1", "invalid_range"),
        ("&offset=%FF", "invalid_query"),
    ],
)
async def test_out_of_range_numbers_in_queries_are_400s(
    daemon: DaemonProcess, tmp_path: Path, extra: str, reason: str
) -> None:
    (tmp_path / "f").write_bytes(b"data")
    status, payload = await _call(daemon, "GET", "/v1/files", os.fsencode(tmp_path / "f"), extra)
    assert (status, _reason(payload)) == (400, reason), payload


async def test_trees_deeper_than_the_recursion_limit(daemon: DaemonProcess, tmp_path: Path) -> None:
    """1,500 levels fit in PATH_MAX; makedirs, rmtree and TarFile.add recursed once per level
    and answered 500 RecursionError (or cut a download short)."""
    top = os.fsencode(tmp_path / "deep")
    leaf = top + b"/d" * 1500 + b"/f"
    status, stat = await _call(daemon, "PUT", "/v1/files", leaf, data=b"deep")
    assert status == 200, stat
    status, payload = await _call(daemon, "GET", "/v1/files/archive", top)
    assert status == 200 and len(payload["raw"]) > 1500 * 512, payload.get("error")
    status, payload = await _call(daemon, "DELETE", "/v1/files", top, "&recursive=1")
    assert status == 204, payload
    assert not os.path.lexists(top)
