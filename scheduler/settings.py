"""Scheduler settings: one frozen dataclass, validated on construction.

Why frozen: the planner relies on invariants that settings could break mid-plan (for
example, non-negative score weights are what lets it place a run of pods on one node
without re-ranking after each pod; see placement_loop.py). Change settings by building a new
:class:`Scheduler` with ``dataclasses.replace(old, ...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandman.base.settings import fixed, part, setting
from scheduler.filters import NodeFilter
from scheduler.model import Resources

__all__ = ["Headroom", "SchedulerSettings", "ScoreWeights"]


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """Weights of the 0-100 scores that rank feasible nodes (all must be >= 0)."""

    packing: float = setting(
        1.0,
        help="most-allocated packing: prefer the node that is fullest after placement",
        dimensionless=True,
    )
    image_locality: float = setting(
        1.0,
        help="prefer nodes where the pod's images are present or prepared by the node agent",
        dimensionless=True,
    )
    taint_toleration: float = setting(
        1.0,
        help="prefer nodes without PreferNoSchedule taints the pod does not tolerate",
        dimensionless=True,
    )

    def __post_init__(self) -> None:
        if min(self.packing, self.image_locality, self.taint_toleration) < 0:
            raise ValueError("score weights must be >= 0")


@dataclass(frozen=True, slots=True)
class Headroom:
    """Capacity the planner never hands out on any node (kept free for other tenants/spikes).

    The reserve on a node is the larger of the absolute amount and the fraction of the node's
    allocatable. It applies to pods this planner places, not to pods already running.
    """

    absolute: Resources = fixed(
        default_factory=Resources, why="a resource vector: set by library users, not a flag"
    )
    fraction: float = setting(
        0.0, help="the share of each node's allocatable kept free, in [0, 1)", dimensionless=True
    )
    pods: int = setting(0, help="pods kept free on each node")

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction < 1.0:
            raise ValueError("headroom fraction must be in [0, 1)")
        if self.pods < 0 or min(self.absolute.cpu, self.absolute.memory) < 0:
            raise ValueError("headroom must be >= 0")


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """Everything tunable about placement."""

    max_starting_per_node: int | None = setting(
        5,
        help="the start-queue cap: most pods a node may have starting (bound, not yet running) "
        "before the planner prefers other nodes. Kubelets with containerd start ~4.5 pods/s, "
        "so 5 is a queue of about a second: on the reference burst 0.99-1.00 of the "
        "API-budget bound vs 0.94-0.95 at 20 (docs/benchmarks/burst.md); none: pure packing",
    )
    pull_slots_per_node: int | None = setting(
        2,
        help="image pulls a node runs at once (the kubelet's maxParallelImagePulls): a node "
        "with this many pulls expected from recent plans ranks below nodes with fewer for pods "
        "whose image it would pull too, so unprepared images pull on many nodes at once; none: "
        "pull queues are not considered",
    )
    pull_join_cap: int | None = setting(
        16,
        help="pods a node may have starting while it pulls their image for earlier pods: they "
        "all start when the pull ends (16 at 4.5/s is ~3.6 s), where each pod sent elsewhere "
        "would start another ~20 s pull; none: the start-queue cap applies to them too",
    )
    incoming_ttl_s: float = setting(
        120.0,
        help="how long a placed pod's image counts as being pulled on its node: later pods of "
        "the image prefer that node and share the pull",
    )
    defer_over_cap: bool = setting(
        False,
        help="when every feasible node's start queue is full, hold the rest of the batch back "
        "instead of spreading it evenly over the queues",
    )
    bind_timeout_s: float = setting(
        300.0,
        help="how long a planned assignment stays reserved while the controller binds it (a "
        "burst of 11,858 binds at ~500 writes/s takes ~25 s, so this must be generous)",
    )
    assume_ttl_s: float = setting(
        30.0,
        help="how long a reservation lives after its bind while waiting for the watch to show "
        "the pod bound (kube-scheduler's assumed-pod TTL)",
    )
    group_wait_s: float = setting(
        30.0,
        help="how long the members of a group wait for the rest of it before they are "
        "reported unschedulable (scheduler/gang.py)",
    )
    group_ttl_s: float = setting(
        600.0,
        help="how long a placed group stays admitted: a later member (a replacement) is placed "
        "without waiting for the others",
    )
    weights: ScoreWeights = part(ScoreWeights, help="weights of the 0-100 node scores (>= 0)")
    headroom: Headroom = part(Headroom, help="capacity never handed out on any node")
    seed: int = setting(
        0, help="seed of the tie-break among equally scored nodes (same input + seed = same plan)"
    )
    extra_node_filters: tuple[NodeFilter, ...] = fixed(
        (),
        why="node filter plugins (Python callables, signature scheduler.filters.NodeFilter) run "
        "after the built-in ones; their reasons appear in unschedulable messages like the "
        "built-in ones. Capacity filters are fixed: slot counting depends on their semantics.",
    )

    def __post_init__(self) -> None:
        if self.max_starting_per_node is not None and self.max_starting_per_node < 1:
            raise ValueError("max_starting_per_node must be >= 1 or None")
        if self.pull_slots_per_node is not None and self.pull_slots_per_node < 1:
            raise ValueError("pull_slots_per_node must be >= 1 or None")
        if self.pull_join_cap is not None and self.pull_join_cap < 1:
            raise ValueError("pull_join_cap must be >= 1 or None")
        if self.incoming_ttl_s < 0:
            raise ValueError("incoming_ttl_s must be >= 0")
        if self.assume_ttl_s <= 0 or self.bind_timeout_s <= 0:
            raise ValueError("assume_ttl_s and bind_timeout_s must be > 0")
