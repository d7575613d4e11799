"""The readiness probe answered while the daemon is still importing (daemon/sandbox/early.py).

The daemon is started with its import of the server held back (a meta-path hook waiting for
a file): `/healthz` must answer meanwhile, and a request sent meanwhile must be served, from
its first byte, once the server runs.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.sandbox.__main__ import EARLY_NAMES, early_address, parse_settings
from daemon.sandbox.early import HEALTHY, EarlyListener, probe_head_length
from daemon.sandbox.settings import DaemonSettings
from devstack.ports import free_listen_port
from devstack.rootfs import healthz_ok
from sandman.base.settings import options
from tests.support.wait import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]

# Holds `import daemon.sandbox.server` (which the daemon needs before it can serve /v1) until
# the file named by argv[1] exists; then runs the daemon with the rest of the argv.
GATED_DAEMON = """
import os, runpy, sys, time
gate = sys.argv.pop(1)
class Gate:
    def find_spec(self, name, path=None, target=None):
        while name == "daemon.sandbox.server" and not os.path.exists(gate):
            time.sleep(0.01)
        return None
sys.meta_path.insert(0, Gate())
runpy.run_module("daemon.sandbox", run_name="__main__", alter_sys=True)
"""


def _http(port: int, head: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.sendall(head)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_healthz_answers_while_the_server_imports_and_requests_wait(tmp_path: Path) -> None:
    port = free_listen_port("127.0.0.1")
    gate = tmp_path / "open"
    argv = [sys.executable, "-c", GATED_DAEMON, str(gate), "--host", "127.0.0.1"]
    env = {**os.environ, "SANDMAN_TOKEN": "t0ken", "SANDMAN_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen(
        [*argv, "--port", str(port)], stdout=subprocess.PIPE, env=env, cwd=REPO_ROOT
    )
    assert proc.stdout is not None
    try:
        wait_until(lambda: healthz_ok(port), timeout_s=20)
        assert proc.poll() is None
        assert select.select([proc.stdout], [], [], 0)[0] == []  # the server is not up yet
        head = b"GET /v1/info HTTP/1.1\r\nHost: s\r\nConnection: close\r\n"
        info = _http(port, head + b"Authorization: Bearer t0ken\r\n\r\n")
        denied = _http(port, head + b"\r\n")
        gate.touch()
        with info, denied:
            answer = _read_all(info)
            assert answer.startswith(b"HTTP/1.1 200"), answer
            assert b'"version"' in answer
            assert _read_all(denied).startswith(b"HTTP/1.1 401")
        assert b"listening on 127.0.0.1:" in proc.stdout.readline()
        assert healthz_ok(port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def test_the_listener_answers_probes_and_hands_the_rest_over_unread() -> None:
    early = EarlyListener("127.0.0.1", 0)
    pending = b"POST /healthz HTTP/1.1\r\nHost: s\r\nContent-Length: 2\r\n\r\n{}"
    try:
        with _http(early.port, b"GET /healthz?x=1 HTTP/1.1\r\nHost: s\r\n\r\n") as probe:
            assert _read_all(probe) == HEALTHY
        other = _http(early.port, pending)
        idle = socket.create_connection(("127.0.0.1", early.port))
        gone = socket.create_connection(("127.0.0.1", early.port))
        gone.close()
        # All four taken, and `gone` dropped, not held (two held before `gone` was even
        # accepted once let a third in after the wait).
        wait_until(lambda: early.accepted == 4 and len(early._held) == 2, timeout_s=10)
    finally:
        listener, held = early.handover()
    with listener, other, idle:
        assert early.answered == 1
        assert len(held) == 2
        by_peer = {sock.getpeername(): sock for sock in held}
        with by_peer[other.getsockname()] as kept, by_peer[idle.getsockname()]:
            kept.settimeout(10)
            assert kept.recv(len(pending), socket.MSG_WAITALL) == pending  # not consumed
        listener.settimeout(10)
        with socket.create_connection(("127.0.0.1", early.port)):
            listener.accept()[0].close()  # still listening, now the server's


@pytest.mark.parametrize(
    ("head", "probe"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: s\r\n\r\n", True),
        (b"GET /healthz?verbose HTTP/1.0\r\n\r\n", True),
        (b"GET /healthz HTTP/1.1\r\nHost: s\r\n", False),  # head not complete yet
        (b"GET /healthzz HTTP/1.1\r\n\r\n", False),
        (b"HEAD /healthz HTTP/1.1\r\n\r\n", False),
        (b"GET /v1/info HTTP/1.1\r\n\r\n", False),
        (b"GET /healthz HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", False),
        (b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", False),
    ],
)
def test_only_complete_bodyless_probes_are_answered_early(head: bytes, probe: bool) -> None:
    length = probe_head_length(head + b"GET /next HTTP/1.1\r\n")
    assert length == (head.index(b"\r\n\r\n") + 4 if probe else 0)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--host", "127.0.0.1", "--port", "0"],
        ["--host=::1", "--port=9000", "--idle-timeout-s", "5"],
        ["--workdir", "/tmp", "--port", "8791", "--host", "127.0.0.2", "--port", "8792"],
        ["--ho", "127.0.0.1"],  # an abbreviation: argparse's to read
        ["--port", "+80"],
        ["--port"],
        ["-h"],
    ],
)
def test_the_early_address_is_the_one_the_settings_name(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDMAN_TOKEN", "t")
    monkeypatch.setenv("SANDMAN_HOST", "127.0.0.3")
    address = early_address(argv, os.environ)
    if address is None:
        assert any(a.startswith(("--ho", "--port", "-h")) for a in argv)
        return
    settings = parse_settings(argv)
    assert address == (settings.host, settings.port)


def test_the_early_names_are_the_ones_the_definition_generates() -> None:
    by_path = {o.path: o for o in options(DaemonSettings)}
    assert {name: (by_path[(name,)].flag, by_path[(name,)].env) for name in EARLY_NAMES} == (
        EARLY_NAMES
    )


WORDS = ["--host", "--port", "--host=127.0.0.9", "--port=8795", "--port=+1", "127.0.0.8", "8796"]
WORDS += ["--ho", "--po", "--p", "--h", "-h", "--workdir", "/tmp", "--max-processes=3"]
WORDS += ["--process-tail-bytes=9", "--header-timeout-s=2", "x", "--", "--host="]


@given(
    argv=st.lists(st.sampled_from(WORDS), max_size=6),
    host=st.sampled_from([None, "127.0.0.3", ""]),
    port=st.sampled_from([None, "8797", "x", ""]),
)
def test_the_early_address_never_differs_from_the_parsed_one(
    argv: list[str], host: str | None, port: str | None
) -> None:
    """Whatever the argv and environment: no early address, or the parse fails (the process
    exits before it serves), or the parse names the same address."""
    environ = {"SANDMAN_TOKEN": "t"}
    for name, value in (("SANDMAN_HOST", host), ("SANDMAN_PORT", port)):
        if value is not None:
            environ[name] = value
    address = early_address(argv, environ)
    if address is None:
        return
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            settings = parse_settings(argv, environ)
    except SystemExit:
        return
    assert address == (settings.host, settings.port)
