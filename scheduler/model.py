"""Typed, immutable models the engine works on; Kubernetes JSON stays at the edge (kube.py).

Why typed models: the planner evaluates filters for every (pod class, node) pair and
compares thousands of pods for equality when it forms equivalence classes. Frozen,
slotted dataclasses make that cheap (hashable, no dict per instance) and make it impossible
for a filter to mutate the cluster it is judging.

Units: CPU in millicores, memory and ephemeral storage in bytes, extended resources
(``nvidia.com/gpu``, ``hugepages-2Mi``) in their integer base unit.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "Code",
    "NodeInfo",
    "Pod",
    "PodShape",
    "Requirement",
    "Resources",
    "SelectorTerm",
    "Status",
    "Taint",
    "Toleration",
    "holds_capacity",
]


class Code(enum.IntEnum):
    """Filter outcome, as in kube-scheduler's framework."""

    SUCCESS = 0
    #: The node could fit the pod if something on it changed (e.g. capacity freed).
    UNSCHEDULABLE = 1
    #: Nothing short of changing the node's spec helps (taints, labels, cordon).
    UNRESOLVABLE = 2


@dataclass(frozen=True, slots=True)
class Status:
    """What a filter says about one node: a code plus the reasons shown to users."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


@dataclass(frozen=True, slots=True)
class Resources:
    """A resource vector: CPU millicores, bytes of memory and ephemeral storage, extended."""

    cpu: int = 0
    memory: int = 0
    storage: int = 0
    extended: tuple[tuple[str, int], ...] = ()

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu + other.cpu,
            self.memory + other.memory,
            self.storage + other.storage,
            _merge(self.extended, other.extended, lambda a, b: a + b),
        )

    def max(self, other: Resources) -> Resources:
        """Per-resource maximum (how init containers combine with regular ones)."""
        return Resources(
            max(self.cpu, other.cpu),
            max(self.memory, other.memory),
            max(self.storage, other.storage),
            _merge(self.extended, other.extended, max),
        )

    def extended_map(self) -> dict[str, int]:
        return dict(self.extended)


def _merge(
    a: tuple[tuple[str, int], ...], b: tuple[tuple[str, int], ...], op: object
) -> tuple[tuple[str, int], ...]:
    if not b:
        return a
    if not a:
        return b
    out = dict(a)
    for name, value in b:
        out[name] = op(out[name], value) if name in out else value  # type: ignore[operator]
    return tuple(sorted(out.items()))


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def describe(self) -> str:
        """kube-scheduler's rendering inside "had untolerated taint {key: value}"."""
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``Toleration.ToleratesTaint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("Equal", "") and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement: ``key`` ``operator`` ``values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """A node selector term: all expressions (on labels) and fields (on metadata.name) hold."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """The static part of a node: what it offers and whom it admits (usage lives elsewhere)."""

    name: str
    allocatable: Resources
    max_pods: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    #: Status of the Ready condition: "True", "False", "Unknown", or None when not reported.
    ready: str | None = "True"
    #: Condition types that are "True" among MemoryPressure/DiskPressure/PIDPressure/
    #: NetworkUnavailable.
    pressure: frozenset[str] = frozenset()
    #: Normalised image references listed in node.status.images.
    images: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class PodShape:
    """Everything placement depends on. Pods with equal shapes form one equivalence class."""

    requests: Resources
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    #: Required node affinity terms (ORed); None when the pod has none.
    affinity: tuple[SelectorTerm, ...] | None = None
    #: Normalised image references of the pod's containers.
    images: tuple[str, ...] = ()
    priority: int = 0
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        # Shapes are dictionary keys for every pending pod; hash the nested tuples once.
        key = (self.requests, self.tolerations, self.node_selector, self.affinity, self.images)
        object.__setattr__(self, "_hash", hash((key, self.priority)))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as the capacity model sees it."""

    uid: str
    shape: PodShape
    namespace: str = ""
    name: str = ""
    node_name: str | None = None
    phase: str = "Pending"
    deleting: bool = False
    #: Every container status reports "terminated" (a deleting pod that has stopped).
    stopped: bool = False
    #: The group it is placed with, all or nothing (``<namespace>/<name>``; scheduler/gang.py)
    #: and the group's size.
    group: str | None = None
    group_size: int = 0

    @property
    def counts(self) -> bool:
        """Does this pod hold capacity on its node? The kubelet's view of an active pod."""
        return holds_capacity(self.node_name, self.phase, self.deleting, self.stopped)

    @property
    def starting(self) -> bool:
        """Bound but not running yet: it occupies a slot in the node's start queue."""
        return self.counts and self.phase == "Pending" and not self.deleting


def holds_capacity(node_name: str | None, phase: str, deleting: bool, stopped: bool) -> bool:
    """A bound pod holds capacity unless it is terminal, or deleting with all containers
    stopped (the kubelet's "active pod" rule used in admission)."""
    if node_name is None or phase in ("Succeeded", "Failed"):
        return False
    return not (deleting and stopped)
