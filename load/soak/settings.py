"""Settings of the soak (``python -m load.soak``): the steady-churn shape compressed, and the
thresholds of its checks.

Why these defaults: the issue's soak is 100,000 sandboxes over 30 minutes through the facade
on 400 simulated nodes (paper-burst), with sessions and file calls; ``--smoke`` is the same
run at a size that takes a minute and a half. The RSS check compares the second half of the
run with its end, because the facade keeps tombstones of sandboxes another replica released
for ``tombstone_s`` (900 s): its memory grows for a quarter hour before it is flat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SMOKE", "SoakSettings", "SoakThresholds"]


@dataclass(frozen=True, slots=True)
class SoakThresholds:
    max_leaked: int = 0
    max_lost: int = 0
    max_untyped: int = 0
    #: RSS growth of each server process from the end of the warm-up to the end of the run.
    max_rss_growth: float = 0.10
    check_rss: bool = True


@dataclass(frozen=True, slots=True)
class SoakSettings:
    out: Path
    sandboxes: int = 100_000
    duration_s: float = 1_800.0
    profile: str = "paper-burst"
    nodes: int | None = None  # None: the profile's (400)
    #: Churn cycles in the run: load.shapes.ChurnShape's raised cosine between ``base`` and
    #: ``peak``, one simulated day each.
    days: float = 3.0
    base: int = 10
    peak: int = 50
    hold_s: float = 20.0  # a sandbox lives this long after Ready, then is released
    workers: int = 4  # SDK clients, round-robin over the facade replicas
    facade_replicas: int = 2
    #: Trainers running tool calls (a session command, a file write and read, an exec) on
    #: real daemons, on ``process_nodes`` nodes of the process runtime.
    tool_workers: int = 4
    process_nodes: int = 2
    warmup_share: float = 0.5
    sample_every_s: float = 5.0
    ready_timeout_s: float = 120.0
    cleanup_timeout_s: float = 120.0
    image: str = "registry.bench/task:1"
    thresholds: SoakThresholds = field(default_factory=SoakThresholds)
    command: str = "python -m load.soak"

    def __post_init__(self) -> None:
        if self.sandboxes < 1 or self.duration_s <= 0 or self.workers < 1:
            raise ValueError("sandboxes, duration and workers must be positive")
        if not 0 <= self.warmup_share < 1:
            raise ValueError("warmup_share must be in [0, 1)")


#: ``--smoke``: the same run, small (about 90 s on this machine).
SMOKE = {"sandboxes": 2_000, "duration_s": 60.0, "nodes": 50, "hold_s": 5.0, "days": 1.0}
