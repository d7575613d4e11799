"""free_listen_port: a port a child process can bind that no client connection will take."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from devstack.ports import PortsExhausted, free_listen_port


class _Scripted(random.Random):
    """Hands out the given ports in order, so a test decides what is picked."""

    def __init__(self, ports: list[int]) -> None:
        super().__init__(0)
        self._ports = iter(ports)

    def randint(self, a: int, b: int) -> int:
        port = next(self._ports)
        assert a <= port <= b
        return port


def _range_file(tmp_path: Path, low: int, high: int = 60999) -> Path:
    path = tmp_path / "ip_local_port_range"
    path.write_text(f"{low}\t{high}\n")
    return path


def test_port_is_below_the_ephemeral_range_and_bindable(tmp_path: Path) -> None:
    for _ in range(20):
        port = free_listen_port(range_file=_range_file(tmp_path, 32768))
        assert 10_000 <= port < 32768
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_a_taken_port_is_skipped(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        spare = free_listen_port()  # below 32768, free a moment ago
        low = busy + 1  # make the busy port legal to pick: it lies below the range
        rng = _Scripted([busy, busy, spare])
        port = free_listen_port(range_file=_range_file(tmp_path, low), rng=rng)
    assert port == spare


def test_exhaustion_is_an_error_not_a_hang(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        rng = _Scripted([busy] * 3)
        with pytest.raises(PortsExhausted, match="after 3 tries"):
            free_listen_port(range_file=_range_file(tmp_path, busy + 1), tries=3, rng=rng)


def test_a_range_starting_too_low_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PortsExhausted, match="ephemeral range starts at 9000"):
        free_listen_port(range_file=_range_file(tmp_path, 9000))


def test_unreadable_range_falls_back_to_the_linux_default(tmp_path: Path) -> None:
    port = free_listen_port(range_file=tmp_path / "missing")
    assert 10_000 <= port < 32768
