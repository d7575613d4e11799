"""Choosing a TCP port for a server that another process will bind.

Why not ``bind(("127.0.0.1", 0))`` and hand the port on: the kernel picks that port from the
ephemeral range, the same range it uses for the *source* port of every outgoing connection.
Between our probe closing the socket and the child process binding the port, any connection
on the machine (a kubelet's watch, a test's HTTP client) can be given it, and the child dies
with EADDRINUSE. That happened in CI: a facade replica of an end-to-end stack lost its port.

Ports below the ephemeral range are never handed out implicitly, only to explicit binds, so
a port chosen there and checked free stays free unless another process explicitly binds the
very same number. A small module of its own because both the bundle's rootfs launcher
(``devstack.rootfs``) and ``devstack.stack`` start servers on ports they choose.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["EPHEMERAL_RANGE_FILE", "PortsExhausted", "free_listen_port"]

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000  # below this live well-known and registered services; stay clear
_FALLBACK_EPHEMERAL_LOW = 32_768  # Linux's default when /proc cannot be read


class PortsExhausted(RuntimeError):
    """No free port below the ephemeral range after many tries."""


def _ephemeral_low(range_file: Path) -> int:
    try:
        low = int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _FALLBACK_EPHEMERAL_LOW
    return low


def _is_free(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_listen_port(
    host: str = "127.0.0.1",
    *,
    tries: int = 200,
    range_file: Path = EPHEMERAL_RANGE_FILE,
    rng: random.Random | None = None,
) -> int:
    """A port on ``host`` that is free now and that the kernel will not give to a client.

    Chosen at random below the ephemeral range (so two stacks starting together rarely
    pick the same one) and checked with a bind. Raises :class:`PortsExhausted` when
    ``tries`` random picks were all taken.
    """
    high = _ephemeral_low(range_file) - 1
    if high <= _LOWEST:
        raise PortsExhausted(f"the ephemeral range starts at {high + 1}: no port below it to use")
    pick = rng or random.SystemRandom()
    for _ in range(tries):
        port = pick.randint(_LOWEST, high)
        if _is_free(host, port):
            return port
    raise PortsExhausted(f"no free port on {host} in {_LOWEST}-{high} after {tries} tries")
