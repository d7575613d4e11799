"""Unit tests of the daemon's pure pieces: output encoding, cgroup parsing, routing, signals."""

from __future__ import annotations

import base64
import signal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.sandbox.__main__ import parse_settings
from daemon.sandbox.output import HeadCapture, StreamDecoder, TailBuffer, encode_bytes
from daemon.sandbox.sessions import TerminalBuffer
from daemon.sandbox.supervisor import child_environment, parse_signal, sanitize_environment
from daemon.sandbox.sysinfo import CgroupReader


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"plain", ("plain", "utf-8")),
        ("é€😀".encode(), ("é€😀", "utf-8")),
        (b"\xff\x00", (base64.b64encode(b"\xff\x00").decode(), "base64")),
        (b"", ("", "utf-8")),
    ],
)
def test_encode_bytes(data: bytes, expected: tuple[str, str]) -> None:
    assert encode_bytes(data) == expected


@pytest.mark.parametrize("cap", range(0, 12))
def test_head_capture_never_splits_a_character(cap: int) -> None:
    text = "a€b😀c"  # 1 + 3 + 1 + 4 + 1 bytes
    capture = HeadCapture(cap)
    for byte in text.encode():
        capture.feed(bytes([byte]))
    out = capture.output()
    assert out.encoding == "utf-8"
    assert text.startswith(out.data)
    assert len(out.data.encode()) <= cap
    assert out.truncated == (cap < 10)
    assert out.total_bytes == 10


def test_tail_buffer_keeps_the_end_and_drops_split_characters() -> None:
    tail = TailBuffer(5)
    tail.feed("x€yz".encode())  # x e2 82 ac y z: the last 5 bytes start inside the euro sign
    out = tail.output()
    assert (out.data, out.truncated, out.total_bytes) == ("€yz", True, 6)
    assert tail.output(max_bytes=2).data == "yz"


def test_stream_decoder_holds_back_split_characters_and_base64s_garbage() -> None:
    decoder = StreamDecoder()
    euro = "€".encode()
    assert decoder.encode(b"a" + euro[:1]) == ("a", "utf-8")
    assert decoder.encode(euro[1:]) == ("€", "utf-8")
    data, encoding = decoder.encode(b"\xff\xfe") or ("", "")
    assert encoding == "base64"
    assert base64.b64decode(data) == b"\xff\xfe"
    assert decoder.encode(b"ok") == ("ok", "utf-8")
    assert decoder.encode(b"", final=True) is None


def test_cgroup_v1_limits_and_usage(tmp_path: Path) -> None:
    for controller, files in {
        "memory": {"memory.limit_in_bytes": "536870912", "memory.usage_in_bytes": "1000"},
        "cpu": {"cpu.cfs_quota_us": "25000", "cpu.cfs_period_us": "100000"},
        "cpuacct": {"cpuacct.usage": "2500000000"},
        "pids": {"pids.max": "max", "pids.current": "7"},
    }.items():
        (tmp_path / controller).mkdir()
        for name, value in files.items():
            (tmp_path / controller / name).write_text(value + "\n")
    membership = tmp_path / "cgroup"
    membership.write_text("9:memory:/\n8:cpu,cpuacct:/\n7:pids:/\n")
    reader = CgroupReader(str(tmp_path), str(membership))
    assert reader.version == 1
    limits, usage = reader.limits(), reader.usage()
    assert (limits.memory_bytes, limits.cpu_cores, limits.pids) == (512 << 20, 0.25, None)
    assert (usage.memory_bytes, usage.cpu_seconds, usage.pids) == (1000, 2.5, 7)


def test_cgroup_v2_limits(tmp_path: Path) -> None:
    for name, value in {
        "memory.max": "max",
        "cpu.max": "50000 100000",
        "pids.max": "128",
        "memory.current": "4096",
        "cpu.stat": "usage_usec 1500000\nuser_usec 1",
        "pids.current": "3",
    }.items():
        (tmp_path / name).write_text(value + "\n")
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    membership = tmp_path / "membership"
    membership.write_text("0::/\n")
    reader = CgroupReader(str(tmp_path), str(membership))
    assert reader.version == 2
    limits, usage = reader.limits(), reader.usage()
    assert (limits.memory_bytes, limits.cpu_cores, limits.pids) == (None, 0.5, 128)
    assert (usage.memory_bytes, usage.cpu_seconds, usage.pids) == (4096, 1.5, 3)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("INT", signal.SIGINT),
        ("SIGTERM", signal.SIGTERM),
        ("9", signal.SIGKILL),
        ("kill", signal.SIGKILL),
    ],
)
def test_parse_signal(name: str, expected: signal.Signals) -> None:
    assert parse_signal(name) is expected


def test_sanitized_environment_drops_token_and_bundle_internals() -> None:
    environ = {
        "PATH": "/bin",
        "SANDMAN_TOKEN": "s3cret",
        "_PYI_ARCHIVE_FILE": "x",
        "LD_LIBRARY_PATH": "/sandman/_internal",
        "LD_LIBRARY_PATH_ORIG": "/opt/lib",
    }
    sanitize_environment(environ)
    assert environ == {"PATH": "/bin", "LD_LIBRARY_PATH": "/opt/lib"}
    assert child_environment({}) is None


@given(
    cap=st.integers(min_value=1, max_value=4096),
    chunks=st.lists(st.binary(max_size=8192), max_size=40),
    collect_every=st.integers(min_value=0, max_value=5),
)
def test_terminal_buffer_is_bounded_and_accounts_for_every_byte(
    cap: int, chunks: list[bytes], collect_every: int
) -> None:
    """Whoever writes and however rarely a command collects: at most `cap` bytes are held, and
    what is held, collected and dropped adds up to what was written, the newest bytes kept."""
    buffer = TerminalBuffer(cap)
    collected = bytearray()
    dropped = 0
    for i, chunk in enumerate(chunks):
        buffer.append_bounded(chunk)
        assert len(buffer) <= cap
        if collect_every and i % collect_every == 0:
            dropped += buffer.take_dropped()
            collected += buffer
            buffer.clear()
    written = b"".join(chunks)
    assert len(collected) + len(buffer) + dropped + buffer.dropped == len(written)
    assert written.endswith(bytes(buffer))


@pytest.mark.parametrize(
    ("environ", "complaint"),
    [
        ({}, "give the token"),
        ({"SANDMAN_TOKEN": "t" * 32, "SANDMAN_TOKEN_SHA256": "a" * 64}, "give the token"),
        ({"SANDMAN_TOKEN_SHA256": "a" * 63}, "64 hex digits"),
        ({"SANDMAN_TOKEN_SHA256": "g" * 64}, "64 hex digits"),
    ],
)
def test_the_daemon_takes_exactly_one_well_formed_credential(
    environ: dict[str, str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_settings([], environ)
    assert complaint in capsys.readouterr().err
