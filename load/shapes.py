"""Load shapes for the locust trainer users, as pure functions of elapsed time.

Why separate from the locustfile: importing locust monkey-patches the standard library
(gevent), which must not happen inside the asyncio test suite; these functions are the
shapes' whole logic and are unit-tested here, while ``load/locustfile.py`` only adapts
them to locust's ``LoadTestShape.tick()``.

A tick is ``(users, spawn_rate)`` or ``None`` (the test is over). Users are trainer
workers; what one worker does is in the locustfile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BurstShape", "ChurnShape", "StepShape", "Tick", "make_shape"]

Tick = tuple[int, float] | None


@dataclass(frozen=True, slots=True)
class BurstShape:
    """``users`` workers started within ``ramp_s`` seconds (one batch create each: with
    ``batch`` sandboxes per worker, users * batch sandboxes requested within ramp_s), held
    for ``hold_s``, then the test ends."""

    users: int = 100
    ramp_s: float = 10.0
    hold_s: float = 120.0

    def tick(self, t: float) -> Tick:
        if t >= self.ramp_s + self.hold_s:
            return None
        return self.users, self.users / max(self.ramp_s, 0.001)


@dataclass(frozen=True, slots=True)
class ChurnShape:
    """A month-like steady churn with daily peaks, time-compressed: one simulated day lasts
    ``day_s`` seconds; the user count follows a raised cosine between ``base`` and ``peak``
    (peak at mid-day), for ``days`` days."""

    base: int = 10
    peak: int = 50
    day_s: float = 60.0
    days: float = 3.0

    def users_at(self, t: float) -> int:
        phase = (t % self.day_s) / self.day_s
        level = (1 - math.cos(2 * math.pi * phase)) / 2  # 0 at midnight, 1 at noon
        return round(self.base + (self.peak - self.base) * level)

    def tick(self, t: float) -> Tick:
        if t >= self.day_s * self.days:
            return None
        # Fast enough to follow the curve, slow enough not to arrive as a burst.
        rate = max(1.0, 4 * (self.peak - self.base) / self.day_s)
        return self.users_at(t), rate


@dataclass(frozen=True, slots=True)
class StepShape:
    """``step_users`` more users every ``step_s`` seconds up to ``max_users``, then hold one
    more step: where does latency bend?"""

    step_users: int = 10
    step_s: float = 30.0
    max_users: int = 100
    spawn_rate: float = 10.0

    def tick(self, t: float) -> Tick:
        steps = math.ceil(self.max_users / self.step_users)
        k = int(t // self.step_s)
        if k > steps:
            return None
        return min(self.max_users, (k + 1) * self.step_users), self.spawn_rate


def make_shape(name: str, users: int, duration_s: float) -> BurstShape | ChurnShape | StepShape:
    """The shape named on locust's command line (``--shape``), scaled by ``--users`` (peak
    users) and ``--run-time``-like ``duration_s``."""
    if name == "burst":
        return BurstShape(users=users, ramp_s=min(10.0, duration_s / 4), hold_s=duration_s)
    if name == "steady-churn":
        return ChurnShape(base=max(1, users // 5), peak=users, day_s=duration_s / 3, days=3)
    if name == "step":
        return StepShape(step_users=max(1, users // 5), step_s=duration_s / 6, max_users=users)
    raise ValueError(f"unknown shape {name!r} (burst, steady-churn, step)")
