"""Settings of the fault benchmark (``python -m load.faults``): the burst each fault runs
against, and the thresholds its checks hold the figures to.

Why a burst smaller than the reference 11,858: each fault gets a fresh stack and a burst of
its own, so the whole series runs in minutes; 2,000 sandboxes on paper-burst's 400 nodes
still has every stage busy when the fault lands. The daemon fault needs real daemons (the
``dev`` profile's process runtime): a burst of tens, which this machine can run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FaultSettings", "Thresholds"]


@dataclass(frozen=True, slots=True)
class Thresholds:
    """What every fault must keep: nothing lost, duplicated or leaked, every failure typed,
    and the fault detected within ``max_detect_s``."""

    max_lost: int = 0
    max_duplicated: int = 0
    max_leaked: int = 0
    max_untyped: int = 0
    max_detect_s: float = 60.0


@dataclass(frozen=True, slots=True)
class FaultSettings:
    out: Path
    faults: tuple[str, ...] = ()  # empty: all, in load.faults.faults.FAULTS order
    sandboxes: int = 2_000
    window_s: float = 5.0
    batch: int = 100
    workers: int = 8  # SDK clients (trainers), round-robin over the facade replicas
    profile: str = "paper-burst"
    nodes: int | None = None  # None: the profile's
    #: The daemon fault's burst, on the process runtime (real daemons).
    daemon_profile: str = "dev"
    daemon_sandboxes: int = 24
    daemons_killed: int = 6
    #: The dying trainer's share of the burst and its owner lease.
    dying_trainer_sandboxes: int = 100
    dying_trainer_lease_s: int = 5
    facade_pause_s: float = 5.0  # SIGSTOP → SIGCONT
    facade_down_s: float = 1.0  # SIGKILL → restarted
    api_error_rate: float = 0.05
    drop_watches_every_s: float = 3.0
    controller_qps: float = 500.0
    controller_burst: int = 500
    #: The leader fault binds slower, so the leader dies with most of the burst unbound.
    leader_fault_qps: float = 100.0
    ready_timeout_s: float = 180.0
    cleanup_timeout_s: float = 60.0
    image: str = "registry.bench/task:1"
    thresholds: Thresholds = field(default_factory=Thresholds)
    command: str = "python -m load.faults"

    def __post_init__(self) -> None:
        if self.sandboxes < 1 or self.batch < 1 or self.workers < 1:
            raise ValueError("sandboxes, batch and workers must be >= 1")
        if self.daemons_killed > self.daemon_sandboxes:
            raise ValueError("daemons_killed must be <= daemon_sandboxes")
