"""Pure parts of the soak: the arrival plan from the churn shape, and the RSS verdict.

Kept free of I/O so the tests check them on hand-made numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from load.shapes import ChurnShape

__all__ = ["Sample", "arrivals", "rss_growth"]


def arrivals(total: int, duration_s: float, shape: ChurnShape) -> list[int]:
    """Sandboxes to request in each second of the run: proportional to the shape's user
    count at that second, rounded so they add up to ``total`` exactly."""
    seconds = max(1, math.ceil(duration_s))
    weights = [shape.users_at(i + 0.5) for i in range(seconds)]
    scale = total / sum(weights)
    out, carried, given = [], 0.0, 0
    for w in weights:
        carried += w * scale
        k = round(carried) - given
        out.append(k)
        given += k
    out[-1] += total - given
    return out


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample of the run: time, live sandbox pods, RSS (bytes) by process, gauges."""

    t: float
    live: int
    ready_total: int
    rss: dict[str, int]
    cached_pods: float  # the first facade's sandman_facade_cached_pods
    gc_deletions: float  # the controller's sandman_gc_deletions_total, all reasons


def rss_growth(samples: Sequence[Sample], process: str, warmup_s: float) -> float:
    """Growth of ``process``'s RSS from the end of the warm-up to the end of the run: the
    median of the last tenth of the samples over the median of the first tenth after the
    warm-up (medians: one sample at a GC pause or a burst should not decide)."""
    after = [s.rss[process] for s in samples if s.t >= warmup_s and process in s.rss]
    if len(after) < 4:
        return math.nan
    k = max(1, len(after) // 10)
    first, last = sorted(after[:k]), sorted(after[-k:])
    return last[len(last) // 2] / first[len(first) // 2] - 1
