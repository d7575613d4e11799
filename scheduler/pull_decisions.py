"""Preparation decisions: which nodes should hold which image before the burst comes.

Pure, like the rest of this package: demands and nodes in, a plan (node -> images) out.
The controller (controller/image_preparer.py) feeds it the ``ImagePreparation`` requests and the
node agents' Leases, writes the plan to the Leases and reports progress.

The rules (docs/node-agent.md, "How the controller decides"):

1. **Enough nodes.** An image expected for ``count`` sandboxes is wanted on
   ``ceil(count / max_starting_per_node)`` nodes (at least 1, at most the eligible ones): a
   burst of all ``count`` at once then fits under every node's start-queue cap without a
   sandbox waiting for a pull.
2. **Stable.** Nodes already planned for an image stay planned (up to the number wanted, with
   rule 7's spread): a new decision never moves a pull that is under way or done.
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
7. **Spread when there is room.** Beyond rule 1, an image gets more nodes, up to
   ``ceil(count / spread_sandboxes_per_node)`` (one per expected sandbox by default), on
   nodes holding fewer than ``spread_images_per_node`` planned images, one node per image per
   round so the room is shared evenly; rule 4 still bounds the pulls. Why: with only rule 1's
   nodes, an image's sandboxes may go to those few nodes only, whose start queues fill while
   the rest of the cluster idles (a preloaded image may start anywhere); rule 1's nodes are
   placed first for every image, so spreading never takes the room an image's minimum needs.

Only eligible nodes are planned: the agent's Lease is fresh, the node is Ready and
schedulable and has room for at least one more pod.
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["AgentNode", "ImageDemand", "PrepareSettings", "decide", "nodes_spread", "nodes_wanted"]


@dataclass(frozen=True, slots=True)
class PrepareSettings:
    #: The scheduler's per-node start-queue cap (SchedulerSettings.max_starting_per_node).
    max_starting_per_node: int = 5
    #: Cluster-wide: planned nodes still pulling one image at once.
    max_pulls_per_image: int = 16
    #: Images planned on one node at most (its image disk is finite).
    max_images_per_node: int = 64
    #: Rule 7: extra nodes only on nodes with fewer planned images than this (0: no spread).
    spread_images_per_node: int = 16
    #: Rule 7: an image is spread over up to ceil(count / this) nodes.
    spread_sandboxes_per_node: int = 1

    def __post_init__(self) -> None:
        least = min(
            self.max_starting_per_node,
            self.max_pulls_per_image,
            self.max_images_per_node,
            self.spread_sandboxes_per_node,
        )
        if least < 1 or self.spread_images_per_node < 0:
            raise ValueError("preparation settings must be >= 1 (spread_images_per_node >= 0)")


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


def nodes_spread(count: int, eligible: int, settings: PrepareSettings) -> int:
    """Nodes an image is spread over when the cluster has room (rule 7), at least
    :func:`nodes_wanted`."""
    wanted = nodes_wanted(count, eligible, settings)
    if settings.spread_images_per_node <= 0:
        return wanted
    return max(wanted, min(eligible, math.ceil(count / settings.spread_sandboxes_per_node)))


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
    # Rule 2 first for every image (in priority order), up to its spread, so stability beats
    # spreading and deciding again on the plan just made restores all of it before anything
    # new is added.
    chosen: dict[str, list[str]] = {}
    for d in ordered:
        chosen[d.image] = _keep(d, eligible, plan, nodes_spread(d.count, len(eligible), s), s)
    for d in ordered:
        want = nodes_wanted(d.count, len(eligible), s)
        if len(chosen[d.image]) < want:
            candidates = _Candidates(d.image, chosen[d.image], eligible, plan, s)
            candidates.fill(want, s.max_images_per_node)
    _spread(ordered, chosen, eligible, plan, s)
    return {name: frozenset(images) for name, images in plan.items()}


def _keep(
    d: ImageDemand,
    eligible: Mapping[str, AgentNode],
    plan: dict[str, set[str]],
    limit: int,
    s: PrepareSettings,
) -> list[str]:
    """The nodes already planned for ``d`` that stay planned (ready ones first)."""
    keep = sorted(
        (n for n in eligible.values() if d.image in n.planned),
        key=lambda n: (d.image not in n.ready, _rendezvous(d.image, n.name)),
    )
    kept: list[str] = []
    for n in keep:
        if len(kept) >= limit or len(plan[n.name]) >= s.max_images_per_node:
            continue
        plan[n.name].add(d.image)
        kept.append(n.name)
    return kept


def _spread(
    ordered: list[ImageDemand],
    chosen: dict[str, list[str]],
    eligible: Mapping[str, AgentNode],
    plan: dict[str, set[str]],
    s: PrepareSettings,
) -> None:
    """Rule 7: extra nodes, one per image per round (in priority order), so the spare room
    is shared evenly among the images rather than given to the first ones."""
    if s.spread_images_per_node <= 0:
        return
    targets = {d.image: nodes_spread(d.count, len(eligible), s) for d in ordered}
    active = [d.image for d in ordered if len(chosen[d.image]) < targets[d.image]]
    if not active:
        return
    # Within a round, the images wanting the most nodes pick first: they are the least free
    # in where they can go, and giving them the emptiest nodes keeps the loads even.
    active.sort(key=lambda image: -targets[image])
    levels = _Levels(eligible, plan, min(s.spread_images_per_node, s.max_images_per_node))
    pulling = {
        image: sum(1 for name in chosen[image] if image not in eligible[name].ready)
        for image in active
    }
    while active:
        still = []
        for image in active:
            holders = chosen[image]
            name = levels.pick(image, holders, may_pull=pulling[image] < s.max_pulls_per_image)
            if name is None:
                continue  # no node can take it: none will in this decision (loads only grow)
            levels.add(name, image)
            holders.append(name)
            pulling[image] += image not in eligible[name].ready
            if len(holders) < targets[image]:
                still.append(image)
        active = still


class _Levels:
    """Nodes by planned-image count, for the spread's rounds: a pick is a node at the lowest
    count with room (an image already present comes first: no pull), found by a cursor
    cycling over the nodes, so consecutive picks — of one image or of the next — land on
    different nodes and the counts rise level by level. Amortized O(1) a pick."""

    def __init__(self, eligible: Mapping[str, AgentNode], plan: dict[str, set[str]], room: int):
        self.eligible, self.plan, self.room = eligible, plan, room
        self.order = sorted(eligible)
        self.cursor = 0
        self.at: Counter[int] = Counter(len(plan[n]) for n in self.order if len(plan[n]) < room)
        self.level = min(self.at, default=room)
        self.present: dict[str, list[str]] = {}
        for name in self.order:
            for image in eligible[name].ready:
                self.present.setdefault(image, []).append(name)

    def add(self, name: str, image: str) -> None:
        load = len(self.plan[name])
        self.plan[name].add(image)
        self.at[load] -= 1
        if load + 1 < self.room:
            self.at[load + 1] += 1
        while self.level < self.room and self.at[self.level] <= 0:
            self.level += 1

    def pick(self, image: str, holders: list[str], *, may_pull: bool) -> str | None:
        taken = set(holders)
        for name in self.present.get(image, ()):
            if name not in taken and len(self.plan[name]) < self.room:
                return name
        if not may_pull:
            return None
        best: str | None = None
        n = len(self.order)
        for step in range(n):
            name = self.order[(self.cursor + step) % n]
            load = len(self.plan[name])
            if name in taken or load >= self.room:
                continue
            if load <= self.level:
                self.cursor = (self.cursor + step + 1) % n
                return name
            if best is None or load < len(self.plan[best]):
                best = name
        return best


class _Candidates:
    """The nodes one image may still be added to, best first (image present, then the
    fewest planned images, then the rendezvous hash), popped lazily: a node whose load
    changed since it was queued is queued again under its new load."""

    def __init__(
        self,
        image: str,
        chosen: list[str],
        eligible: Mapping[str, AgentNode],
        plan: dict[str, set[str]],
        s: PrepareSettings,
    ) -> None:
        self.image, self.chosen, self.eligible, self.plan, self.s = image, chosen, eligible, plan, s
        self.pulling = sum(1 for name in chosen if image not in eligible[name].ready)
        taken = set(chosen)
        self.heap = [
            (image not in n.ready, len(plan[n.name]), _rendezvous(image, n.name), n.name)
            for n in eligible.values()
            if n.name not in taken
        ]
        heapq.heapify(self.heap)

    def fill(self, want: int, room: int) -> None:
        while len(self.chosen) < want and self.add_one(room):
            pass

    def add_one(self, room: int) -> bool:
        """Plan the image on the best node with fewer than ``room`` planned images, within
        the pull bound; False when no node can take it (then none will in this decision:
        loads and pulls only grow)."""
        while self.heap:
            absent, load, rank, name = heapq.heappop(self.heap)
            now = len(self.plan[name])
            if now >= room:
                continue
            if now != load:
                heapq.heappush(self.heap, (absent, now, rank, name))
                continue
            if absent and self.pulling >= self.s.max_pulls_per_image:
                self.heap.clear()  # present nodes come first: every one left is absent
                return False
            self.plan[name].add(self.image)
            self.chosen.append(name)
            self.pulling += absent
            return True
        return False
