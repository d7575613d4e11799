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
    """``reserve()`` returns the first second octet of a free range of ``span`` octets.

    Every octet of the range is locked (a socket on ``127.<octet>.0.1``), not only the first:
    locking the first alone let a one-octet cluster take the second octet of a 400-node
    cluster's range (seen: a harness test's daemon failed to bind an address a paper-burst
    cluster's stand-in daemon held)."""

    def __init__(self, nodes: int) -> None:
        self.span = max(1, (nodes + 255) // 256)
        self.first = 1
        self._locks: list[socket.socket] = []

    def reserve(self) -> int:
        for first in range(1, 256 - self.span):
            locks = self._lock_range(first)
            if locks:
                self._locks, self.first = locks, first
                return first
        raise SimclusterError("no free loopback pod network (too many clusters on this machine)")

    def _lock_range(self, first: int) -> list[socket.socket]:
        """Locks on every octet of the range from ``first``; none if one is taken."""
        locks: list[socket.socket] = []
        for octet in range(first, first + self.span):
            lock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                lock.bind((f"127.{octet}.0.1", LOCK_PORT))
            except OSError:
                lock.close()
                for held in locks:
                    held.close()
                return []
            locks.append(lock)
        return locks

    @property
    def lock_fds(self) -> tuple[int, ...]:
        """The lock sockets' descriptors, for pod processes to inherit (none before reserve)."""
        return tuple(lock.fileno() for lock in self._locks)

    def release(self) -> None:
        for lock in self._locks:
            lock.close()
        self._locks = []
