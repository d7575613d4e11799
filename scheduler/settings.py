"""Scheduler settings: one frozen dataclass, validated on construction.

Why frozen: the planner relies on invariants that settings could break mid-plan (for
example, non-negative score weights are what lets it place a run of pods on one node
without re-ranking after each pod; see planner.py). Change settings by building a new
:class:`Scheduler` with ``dataclasses.replace(old, ...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.filters import NodeFilter
from scheduler.model import Resources

__all__ = ["Headroom", "SchedulerSettings", "ScoreWeights"]


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """Weights of the 0-100 scores that rank feasible nodes (all must be >= 0)."""

    #: Most-allocated packing: prefer the node that is fullest after placement.
    packing: float = 1.0
    #: Prefer nodes where the pod's images are present or prepared by the node agent.
    image_locality: float = 1.0
    #: Prefer nodes without PreferNoSchedule taints the pod does not tolerate.
    taint_toleration: float = 1.0

    def __post_init__(self) -> None:
        if min(self.packing, self.image_locality, self.taint_toleration) < 0:
            raise ValueError("score weights must be >= 0")


@dataclass(frozen=True, slots=True)
class Headroom:
    """Capacity the planner never hands out on any node (kept free for other tenants/spikes).

    The reserve on a node is the larger of the absolute amount and the fraction of the node's
    allocatable. It applies to pods this planner places, not to pods already running.
    """

    absolute: Resources = field(default_factory=Resources)
    fraction: float = 0.0
    pods: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction < 1.0:
            raise ValueError("headroom fraction must be in [0, 1)")
        if self.pods < 0 or min(self.absolute.cpu, self.absolute.memory) < 0:
            raise ValueError("headroom must be >= 0")


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """Everything tunable about placement."""

    #: Most pods a node may have *starting* (bound, not yet running) before the planner
    #: prefers other nodes. Kubelets with containerd start ~4.5 pods/s, so 5 is a queue of
    #: about a second: on the reference burst 0.99-1.00 of the API-budget bound vs 0.94-0.95
    #: at 20 (docs/benchmarks/burst.md, "The reference burst"). None disables burst
    #: awareness (pure packing).
    max_starting_per_node: int | None = 5
    #: Image pulls a node runs at once (the kubelet's maxParallelImagePulls; containerd
    #: unpacks are disk- and CPU-bound). A node with this many pulls expected from recent
    #: plans ranks below nodes with fewer for pods whose image it would have to pull too, so
    #: a burst of unprepared images pulls on many nodes at once instead of queueing behind
    #: one node's pulls. None: pull queues are not considered.
    pull_slots_per_node: int | None = 2
    #: Pods a node may have starting while it pulls their image for earlier pods: they all
    #: start when the pull ends (16 at 4.5/s is ~3.6 s), where each pod sent elsewhere
    #: would start another ~20 s pull. None: the start-queue cap applies to them too.
    pull_join_cap: int | None = 16
    #: Seconds a placed pod's image counts as being pulled on its node (a cold pull, and a
    #: queue of them): later pods of the image prefer that node and share the pull.
    incoming_ttl_s: float = 120.0
    #: When every feasible node's start queue is full, hold the rest of the batch back
    #: (``Plan.deferred``) instead of spreading it evenly over the queues.
    defer_over_cap: bool = False
    #: Seconds a planned assignment stays reserved while the controller binds it. A burst
    #: of 11,858 binds at ~500 writes/s takes ~25 s, so this must be generous; report each
    #: bind's outcome with ``finish_binding`` or ``forget`` well within it.
    bind_timeout_s: float = 300.0
    #: Seconds a reservation lives after ``finish_binding`` while waiting for the watch to
    #: show the pod bound (kube-scheduler's assumed-pod TTL).
    assume_ttl_s: float = 30.0
    #: Seconds the members of a group wait for the rest of it before they are reported
    #: unschedulable ("k of G members pending"; scheduler/gang.py).
    group_wait_s: float = 30.0
    #: Seconds a placed group stays admitted: a later member (a replacement) is placed
    #: without waiting for the others.
    group_ttl_s: float = 600.0
    weights: ScoreWeights = field(default_factory=ScoreWeights)
    headroom: Headroom = field(default_factory=Headroom)
    #: Seed of the tie-break among equally scored nodes (same input + seed = same plan).
    seed: int = 0
    #: Extra node filters (plugins with the signature of scheduler.filters.NodeFilter), run
    #: after the built-in ones. Their reasons appear in unschedulable messages like the
    #: built-in ones. Capacity filters are fixed: slot counting depends on their semantics.
    extra_node_filters: tuple[NodeFilter, ...] = ()

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
