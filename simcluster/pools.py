"""Node pools: a cluster made of several node shapes, as real clusters are.

Why pools are a layer of their own: a real cluster mixes a general pool, a tainted
high-memory pool and a busy pool other tenants fill up, and a placement that ignores
tolerations, selectors or the foreign load only shows its mistakes in such a mix. Each pool
is one ``NodeSettings`` (capacity, labels, taints, creation rate, preloaded images) plus its
count and the share other tenants hold of each of its nodes — a fraction and a spread, so
the busy nodes are not all equally busy.

``node_plan`` turns the pools into one entry per node, in node order. It is a pure function
of the settings and the seed: the cluster starts exactly these nodes, and a test can compare
the plan of a profile with what it was before pools existed (a single-pool profile is one
unnamed pool of ``nodes`` nodes of ``node``, with no pool label).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace

from simcluster.errors import SimclusterError
from simcluster.kubelet.settings import NodeSettings

__all__ = [
    "MAX_FOREIGN_FRACTION",
    "POOL_LABEL",
    "NodePool",
    "PlannedNode",
    "PoolError",
    "node_plan",
]

#: The label every node of a named pool carries (as GKE's ``cloud.google.com/gke-nodepool``).
POOL_LABEL = "simcluster.io/pool"
#: Other tenants never hold a whole node: a spread cannot push a node past this.
MAX_FOREIGN_FRACTION = 0.95
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")


class PoolError(SimclusterError, ValueError):
    """A pool whose settings cannot describe nodes."""


@dataclass(frozen=True, slots=True)
class NodePool:
    """``count`` nodes of one shape. ``foreign_fraction`` ± ``foreign_spread`` (uniform, per
    node, from the cluster's seed) of each node's CPU and memory is held by other tenants."""

    name: str
    count: int
    node: NodeSettings
    foreign_fraction: float = 0.0
    foreign_spread: float = 0.0

    def __post_init__(self) -> None:
        if not _LABEL_VALUE.fullmatch(self.name):
            raise PoolError(f"pool name {self.name!r} is not a label value ({POOL_LABEL})")
        if self.count < 0:
            raise PoolError(f"pool {self.name!r}: count must be >= 0, not {self.count}")
        if not 0 <= self.foreign_fraction <= MAX_FOREIGN_FRACTION:
            raise PoolError(
                f"pool {self.name!r}: foreign_fraction must be in [0, {MAX_FOREIGN_FRACTION}], "
                f"not {self.foreign_fraction}"
            )
        if self.foreign_spread < 0:
            raise PoolError(f"pool {self.name!r}: foreign_spread must be >= 0")

    def foreign_fractions(self, seed: int) -> tuple[float, ...]:
        """Each node's share, clamped to [0, MAX_FOREIGN_FRACTION]; exact without spread."""
        if not self.foreign_spread:
            return (self.foreign_fraction,) * self.count
        rng = random.Random(f"{seed}/{self.name}")
        lo = max(0.0, self.foreign_fraction - self.foreign_spread)
        hi = min(MAX_FOREIGN_FRACTION, self.foreign_fraction + self.foreign_spread)
        return tuple(round(rng.uniform(lo, hi), 4) for _ in range(self.count))


@dataclass(frozen=True, slots=True)
class PlannedNode:
    """One node to start: its pool, its settings (pool label included) and foreign share."""

    pool: str
    node: NodeSettings
    foreign_fraction: float


def node_plan(
    pools: tuple[NodePool, ...], seed: int, preload_for_foreign: str = ""
) -> list[PlannedNode]:
    """The nodes of ``pools`` in order. A named pool labels its nodes ``POOL_LABEL=name``;
    ``preload_for_foreign`` (the other tenants' image) is preloaded where they run."""
    plan: list[PlannedNode] = []
    for pool in pools:
        node = pool.node
        if pool.name:
            node = replace(node, labels={**node.labels, POOL_LABEL: pool.name})
        fractions = pool.foreign_fractions(seed)
        missing = preload_for_foreign not in node.preloaded_images
        if preload_for_foreign and missing and any(fractions):
            images = (*node.preloaded_images, preload_for_foreign)
            node = replace(node, preloaded_images=images)
        plan.extend(PlannedNode(pool.name, node, f) for f in fractions)
    return plan
