"""Loopback pod networks that do not collide between simulated clusters on one machine.

In process mode every pod's daemon listens on its own loopback address (127.<n>.<node>.<host>).
Two clusters on one machine (a developer's ``sandman-dev up`` next to a test run, or tests in
parallel) must not hand out the same addresses, or a trainer's call lands in another
cluster's sandbox. A cluster *reserves* a range of second octets by binding a lock socket on
the range's first node address; the kernel releases it when the last process holding the socket
exits, even on SIGKILL, so a crashed cluster never leaks its range. Every pod process of the
cluster inherits the lock (``lock_fd``, passed by the process runtime): a pod that outlives its
cluster (the cluster SIGKILLed, its pods in sessions of their own) keeps the range reserved
until it exits, so no later cluster hands out an address that a stale daemon still answers on
(seen: a leaked daemon on 127.1.0.4 made another cluster's sandbox answer 502
``daemon_rejected_token`` and its own daemon fail to bind).
"""

from __future__ import annotations

import socket

from simcluster.errors import SimclusterError

__all__ = ["LOCK_PORT", "PodNetwork"]

LOCK_PORT = 47999


class PodNetwork:
    """``reserve()`` returns the first second octet of a free range of ``span`` octets."""

    def __init__(self, nodes: int) -> None:
        self.span = max(1, (nodes + 255) // 256)
        self.first = 1
        self._lock: socket.socket | None = None

    def reserve(self) -> int:
        for first in range(1, 255 - self.span, self.span):
            lock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                lock.bind((f"127.{first}.0.1", LOCK_PORT))
            except OSError:
                lock.close()
                continue
            self._lock, self.first = lock, first
            return first
        raise SimclusterError("no free loopback pod network (too many clusters on this machine)")

    @property
    def lock_fd(self) -> int | None:
        """The lock socket's descriptor, for pod processes to inherit (None before reserve)."""
        return self._lock.fileno() if self._lock is not None else None

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None
