"""Preparation decisions: which nodes should hold which image before the burst comes.

Pure, like the rest of this package: demands and nodes in, a plan (node -> images) out.
The controller (controller/prepare.py) feeds it the ``ImagePreparation`` requests and the
node agents' Leases, writes the plan to the Leases and reports progress.

The rules (docs/node-agent.md, "How the controller decides"):

1. **Enough nodes.** An image expected for ``count`` sandboxes is wanted on
   ``ceil(count / max_starting_per_node)`` nodes (at least 1, at most the eligible ones): a
   burst of all ``count`` at once then fits under every node's start-queue cap without a
   sandbox waiting for a pull.
2. **Stable.** Nodes already planned for an image stay planned (up to the number wanted): a
   new decision never moves a pull that is under way or done.
3. **Free first, then spread.** New nodes are, in order: nodes where the image is already
   present (no pull), then the nodes with the fewest planned images (no hot spot), ties
   broken by a rendezvous hash of (image, node) — deterministic, and different images pick
   different nodes.
4. **Registry fan-out.** At most ``max_pulls_per_image`` planned nodes may be without the
   image at once, cluster-wide; the rest of an image's nodes are planned as earlier ones
   become ready (the controller decides again when a Lease changes).
5. **Disk.** A node is planned at most ``max_images_per_node`` images; images with the
   earliest deadline, then the largest count, are placed first.
6. **Release.** An image no demand names is in no plan (the agents remove what they
   pulled of it after their grace period).

Only eligible nodes are planned: the agent's Lease is fresh, the node is Ready and
schedulable and has room for at least one more pod.
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["AgentNode", "ImageDemand", "PrepareSettings", "decide", "nodes_wanted"]


@dataclass(frozen=True, slots=True)
class PrepareSettings:
    #: The scheduler's per-node start-queue cap (SchedulerSettings.max_starting_per_node).
    max_starting_per_node: int = 5
    #: Cluster-wide: planned nodes still pulling one image at once.
    max_pulls_per_image: int = 16
    #: Images planned on one node at most (its image disk is finite).
    max_images_per_node: int = 64

    def __post_init__(self) -> None:
        if min(self.max_starting_per_node, self.max_pulls_per_image, self.max_images_per_node) < 1:
            raise ValueError("preparation settings must be >= 1")


@dataclass(frozen=True, slots=True)
class ImageDemand:
    """One image, the sandboxes expected from it (summed over requests), and an ordering
    key: the earliest deadline of the requests naming it (None: no deadline, placed last)."""

    image: str
    count: int
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class AgentNode:
    name: str
    #: The agent's Lease is fresh and the node can take pods.
    eligible: bool = True
    #: Images present on the node (the agent's ready set).
    ready: frozenset[str] = frozenset()
    #: The current plan (the Lease's ``sandman.io/prepare``).
    planned: frozenset[str] = frozenset()
    #: Images whose last pull failed on this node.
    failed: frozenset[str] = field(default_factory=frozenset)


def nodes_wanted(count: int, eligible: int, settings: PrepareSettings) -> int:
    """Nodes an image needs so ``count`` sandboxes start under the start-queue cap."""
    if eligible <= 0 or count <= 0:
        return 0
    return max(1, min(eligible, math.ceil(count / settings.max_starting_per_node)))


def _order(d: ImageDemand) -> tuple[bool, float, int, str]:
    return (d.deadline is None, d.deadline or 0.0, -d.count, d.image)


def _rendezvous(image: str, node: str) -> int:
    return zlib.crc32(f"{image}\0{node}".encode())


def decide(
    demands: Iterable[ImageDemand],
    nodes: Iterable[AgentNode],
    settings: PrepareSettings | None = None,
) -> dict[str, frozenset[str]]:
    """The new plan of every eligible node (node -> images); ineligible nodes are left out
    (the caller leaves their Leases alone)."""
    s = settings or PrepareSettings()
    eligible = {n.name: n for n in nodes if n.eligible}
    plan: dict[str, set[str]] = {name: set() for name in eligible}
    ordered = sorted(demands, key=_order)
    # Rule 2 first for every image (in priority order), so stability beats spreading.
    kept: dict[str, list[str]] = {}
    for d in ordered:
        want = nodes_wanted(d.count, len(eligible), s)
        keep = sorted(
            (n for n in eligible.values() if d.image in n.planned),
            key=lambda n: (d.image not in n.ready, _rendezvous(d.image, n.name)),
        )
        chosen: list[str] = []
        for n in keep:
            if len(chosen) >= want or len(plan[n.name]) >= s.max_images_per_node:
                continue
            plan[n.name].add(d.image)
            chosen.append(n.name)
        kept[d.image] = chosen
    for d in ordered:
        _extend(d, kept[d.image], eligible, plan, s)
    return {name: frozenset(images) for name, images in plan.items()}


def _extend(
    d: ImageDemand,
    chosen: list[str],
    eligible: Mapping[str, AgentNode],
    plan: dict[str, set[str]],
    s: PrepareSettings,
) -> None:
    """Add nodes for ``d`` until it has the nodes it wants, within the pull bound."""
    want = nodes_wanted(d.count, len(eligible), s)
    pulling = sum(1 for name in chosen if d.image not in eligible[name].ready)
    if len(chosen) >= want:
        return
    taken = set(chosen)
    image = d.image
    heap = [
        (image not in n.ready, len(plan[n.name]), _rendezvous(image, n.name), n.name)
        for n in eligible.values()
        if n.name not in taken
    ]
    heapq.heapify(heap)  # popped lazily: most images stop after a few nodes
    while heap and len(chosen) < want:
        n = eligible[heapq.heappop(heap)[-1]]
        if len(plan[n.name]) >= s.max_images_per_node:
            continue
        needs_pull = d.image not in n.ready
        if needs_pull and pulling >= s.max_pulls_per_image:
            continue
        plan[n.name].add(d.image)
        chosen.append(n.name)
        pulling += needs_pull
