"""Generated inputs at the daemon's edges: paths as any bytes, numbers of any size and kind.

Run against the sandboxed daemon (``sandboxed_daemon``): a generated path may well be ``/``
spelt some new way, ``..`` up to the root, or a system directory, and the requests include
recursive deletes. Each property is the API's promise for bad input: an answer below 500
with a machine-readable reason, never a crash, a hang or a 500; and for names that exist,
the listing's encoding gives back the exact bytes.
"""

from __future__ import annotations

import base64
import json
import math
import os
from urllib.parse import quote_from_bytes

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.daemon import DaemonProcess

TIMEOUT_S = 15
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))

SEGMENTS = st.one_of(
    st.sampled_from([b"", b".", b"..", b"...", b"tmp", b"sandbox", b"/", b"\xff\xfe", b"~"]),
    st.binary(min_size=1, max_size=12).filter(lambda b: b"/" not in b and b"\0" not in b),
    st.builds(lambda n: b"x" * n, st.integers(200, 300)),
)
PATHS = st.one_of(
    st.lists(SEGMENTS, max_size=6).map(b"/".join),
    st.lists(SEGMENTS, max_size=6).map(lambda parts: b"/" + b"/".join(parts)),
    st.builds(lambda n: b"/tmp/" + b"d/" * n, st.integers(1000, 2500)),
    st.binary(max_size=64),
)
FILE_CALLS = [
    ("GET", "/v1/files", ""),
    ("GET", "/v1/files/stat", ""),
    ("GET", "/v1/files/list", ""),
    ("GET", "/v1/files/archive", ""),
    ("PUT", "/v1/files", "&mode=600"),
    ("DELETE", "/v1/files", "&recursive=1"),
    ("PUT", "/v1/files/archive", ""),
]


def _call(
    daemon: DaemonProcess, method: str, endpoint: str, query: str, body: bytes | None = None
) -> requests.Response:
    headers = {"Authorization": f"Bearer {daemon.token}"}
    url = f"{daemon.url}{endpoint}?{query}"
    return requests.request(method, url, data=body, headers=headers, timeout=TIMEOUT_S)


def _assert_clear_answer(response: requests.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json()["error"]["reason"], response.text


@SETTINGS
@given(path=PATHS, call=st.sampled_from(FILE_CALLS))
def test_any_path_gets_a_clear_answer(
    sandboxed_daemon: DaemonProcess, path: bytes, call: tuple[str, str, str]
) -> None:
    method, endpoint, extra = call
    if (method, endpoint) == ("GET", "/v1/files/archive"):  # not a download of the whole host
        path = b"/tmp/sandbox/" + b"/".join(p for p in path.split(b"/") if p != b"..")
    query = f"path={quote_from_bytes(path, safe='/')}{extra}"
    response = _call(sandboxed_daemon, method, endpoint, query, b"x" if method == "PUT" else None)
    _assert_clear_answer(response)
    if method == "DELETE" and os.path.normpath(b"/tmp/sandbox/" + path) == b"/":
        assert response.status_code == 400


NAMES = st.binary(min_size=1, max_size=40).filter(
    lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..")
)


@SETTINGS
@given(name=NAMES)
def test_any_name_is_listed_losslessly_and_addressable(
    sandboxed_daemon: DaemonProcess, name: bytes
) -> None:
    directory = b"/tmp/sandbox/names-" + os.urandom(4).hex().encode()
    full = directory + b"/" + name
    quoted = quote_from_bytes(full, safe="/")
    written = _call(sandboxed_daemon, "PUT", "/v1/files", f"path={quoted}", name)
    assert written.status_code == 200, written.text
    listing = _call(
        sandboxed_daemon, "GET", "/v1/files/list", f"path={quote_from_bytes(directory)}"
    ).json()
    (entry,) = listing["entries"]
    listed = (
        base64.b64decode(entry["name"])
        if entry["name_encoding"] == "base64"
        else entry["name"].encode()
    )
    assert listed == name
    read = _call(
        sandboxed_daemon, "GET", "/v1/files", f"path={quote_from_bytes(directory + b'/' + listed)}"
    )
    assert read.content == name
    removed = _call(
        sandboxed_daemon, "DELETE", "/v1/files", f"path={quote_from_bytes(directory)}&recursive=1"
    )
    assert removed.status_code == 204


QUERY_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e9", "0x10", "", " 1", "١٢", "0o7", "%FF", "-0"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
JSON_NUMBERS = st.one_of(
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["1e400", "-1e400", "NaN", "Infinity", "1" * 400]),  # raw JSON text
)


@SETTINGS
@given(name=st.sampled_from(["offset", "length", "tail_bytes", "mode"]), value=QUERY_NUMBERS)
def test_any_number_in_a_query_gets_a_clear_answer(
    sandboxed_daemon: DaemonProcess, name: str, value: str
) -> None:
    endpoint, method = {
        "offset": ("/v1/files", "GET"),
        "length": ("/v1/files", "GET"),
        "tail_bytes": ("/v1/processes/p-none/output", "GET"),
        "mode": ("/v1/files", "PUT"),
    }[name]
    query = f"path=/tmp/sandbox/numbers&{name}={value}"
    _assert_clear_answer(_call(sandboxed_daemon, method, endpoint, query, b"n"))


def _json_with(field: str, value: object) -> bytes:
    raw = value if isinstance(value, str) else json.dumps(value)
    body = {"argv": ["true"]}
    return json.dumps(body).encode()[:-1] + f', "{field}": {raw}}}'.encode()


@SETTINGS
@given(field=st.sampled_from(["timeout_s", "kill_grace_s", "max_output_bytes"]), value=JSON_NUMBERS)
def test_any_number_in_a_body_gets_a_clear_answer(
    sandboxed_daemon: DaemonProcess, field: str, value: object
) -> None:
    if isinstance(value, float) and field == "max_output_bytes":
        value = math.floor(value) if abs(value) < 2**80 else value
    response = _call(sandboxed_daemon, "POST", "/v1/exec", "", _json_with(field, value))
    _assert_clear_answer(response)
    for endpoint, body in (
        (
            "/v1/processes/p-none/wait",
            f'{{"timeout_s": {json.dumps(value) if not isinstance(value, str) else value}}}',
        ),
    ):
        _assert_clear_answer(_call(sandboxed_daemon, "POST", endpoint, "", body.encode()))


pytestmark = pytest.mark.timeout(120)
