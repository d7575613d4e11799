"""The scheduling queue: which pending pods to try now, which wait, and what wakes them.

Upstream's three queues, reduced to what a simulator needs: *active* pods are tried in
arrival order; a pod that failed waits out its back-off (1 s doubling to 10 s per attempt);
a pod that fits nowhere is *unschedulable* and is only tried again when the cluster changed
(a node added or changed, a pod gone from a node) — then after its back-off — or after
``unschedulable_timeout_s`` anyway. Nothing polls: the loop sleeps until ``wake`` is set or
the earliest back-off ends.
"""

from __future__ import annotations

import asyncio
import time

from simcluster.scheduler.settings import SchedulerSettings

__all__ = ["PodKey", "SchedulingQueue"]

PodKey = tuple[str, str]  # (namespace, name)


class SchedulingQueue:
    def __init__(self, settings: SchedulerSettings) -> None:
        self.settings = settings
        self.wake = asyncio.Event()
        self._active: dict[PodKey, None] = {}  # ordered: first in, first tried
        self._backoff: dict[PodKey, float] = {}  # key -> when its back-off ends
        self._unschedulable: dict[PodKey, float] = {}  # key -> when it was parked
        self._attempts: dict[PodKey, int] = {}
        self._until: dict[PodKey, float] = {}  # key -> end of its back-off

    def __len__(self) -> int:
        return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def add(self, key: PodKey) -> None:
        """A new pending pod, or one whose spec changed: try it (after its back-off)."""
        self._unschedulable.pop(key, None)
        self._backoff.pop(key, None)
        self._enqueue(key, time.monotonic())

    def remove(self, key: PodKey) -> None:
        for table in (self._active, self._backoff, self._unschedulable, self._attempts):
            table.pop(key, None)
        self._until.pop(key, None)

    def _backoff_s(self, attempts: int) -> float:
        s = self.settings
        return min(s.backoff_max_s, s.backoff_initial_s * 2 ** max(attempts - 1, 0))

    def _failed(self, key: PodKey) -> None:
        attempts = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempts
        self._until[key] = time.monotonic() + self._backoff_s(attempts)

    def unschedulable(self, key: PodKey) -> None:
        """It fits nowhere: wait for a change in the cluster."""
        self._failed(key)
        self._unschedulable[key] = time.monotonic()

    def retry(self, key: PodKey) -> None:
        """It failed for another reason (its bind): try again after its back-off."""
        self._failed(key)
        self._unschedulable.pop(key, None)  # (a failed status write after the verdict)
        self._backoff[key] = self._until[key]
        self.wake.set()

    def cluster_changed(self) -> None:
        """Something may let unschedulable pods fit: move them on (after their back-off)."""
        now = time.monotonic()
        for key in list(self._unschedulable):
            del self._unschedulable[key]
            self._enqueue(key, now)

    def _enqueue(self, key: PodKey, now: float) -> None:
        until = self._until.get(key, 0.0)
        if until > now:
            self._backoff[key] = until
        else:
            self._active[key] = None
        self.wake.set()

    def pop_ready(self) -> list[PodKey]:
        """The pods to try now, in order; they leave the queue until re-added."""
        now = time.monotonic()
        for key, until in list(self._backoff.items()):
            if until <= now:
                del self._backoff[key]
                self._active[key] = None
        timeout = self.settings.unschedulable_timeout_s
        for key, since in list(self._unschedulable.items()):
            if now - since >= timeout:
                del self._unschedulable[key]
                self._active[key] = None
        ready = list(self._active)
        self._active.clear()
        return ready

    def next_wakeup_s(self) -> float | None:
        """Seconds until the earliest back-off or unschedulable timeout ends (None: none)."""
        now = time.monotonic()
        times = list(self._backoff.values())
        times += [t + self.settings.unschedulable_timeout_s for t in self._unschedulable.values()]
        return max(min(times) - now, 0.0) if times else None
