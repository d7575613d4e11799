"""The node table: per-node facts that change only when the node changes.

Why: the planner needs, for every node and every plan, the node's order, its limit for new
pods (allocatable minus headroom) and its tie-break rank. Recomputing them for 5,000 nodes
on every plan costs more than placing 10,000 pods, yet they only change on a Node event.
The table caches them per :class:`NodeInfo` object (the model replaces the object on every
update, so identity is the cache key) and re-sorts node names only when the set of nodes
changes.

Tie-break ranks are a keyed CRC32 of the node name: deterministic for a seed, independent of
the process's string-hash randomisation and of which other nodes exist.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from scheduler.filters import Capacity
from scheduler.model import NodeInfo
from scheduler.settings import SchedulerSettings

__all__ = ["NodeTable", "node_limit", "tie_rank"]


def node_limit(node: NodeInfo, settings: SchedulerSettings) -> Capacity:
    """What pods placed by this planner may use in total on ``node`` (after headroom)."""
    room, alloc = settings.headroom, node.allocatable
    frac = room.fraction

    def keep(total: int, absolute: int) -> int:
        return total - max(absolute, int(total * frac))

    return Capacity(
        keep(alloc.cpu, room.absolute.cpu),
        keep(alloc.memory, room.absolute.memory),
        keep(alloc.storage, room.absolute.storage),
        node.max_pods - max(room.pods, int(node.max_pods * frac)),
        alloc.extended,
    )


def tie_rank(seed: int, name: str) -> int:
    """Seeded, stable tie-break rank of a node among equally scored ones."""
    return zlib.crc32(f"{seed}/{name}".encode())


class NodeTable:
    """Sorted nodes with their limits and ranks, refreshed incrementally."""

    __slots__ = ("_entries", "_last", "_names", "_settings", "_version", "_view")

    def __init__(self, settings: SchedulerSettings) -> None:
        self._settings = settings
        self._entries: dict[str, tuple[NodeInfo, Capacity, int]] = {}
        self._names: list[str] = []
        self._version = -1
        self._last: tuple[int, int] | None = None
        self._view: tuple[list[NodeInfo], list[Capacity], list[int]] = ([], [], [])

    def refresh(
        self, nodes: Mapping[str, NodeInfo], version: int, node_version: int | None = None
    ) -> tuple[list[NodeInfo], list[Capacity], list[int]]:
        """Current nodes (sorted by name), their limits and ranks (do not mutate the lists).

        ``version`` must change whenever a node name is added or removed; ``node_version``,
        if given, whenever any node changes (then an unchanged cluster costs nothing).
        """
        if node_version is not None and self._last == (version, node_version):
            return self._view
        if version != self._version:
            self._names = sorted(nodes)
            self._version = version
            self._entries = {n: e for n, e in self._entries.items() if n in nodes}
        infos: list[NodeInfo] = []
        limits: list[Capacity] = []
        ranks: list[int] = []
        entries, settings = self._entries, self._settings
        for name in self._names:
            info = nodes[name]
            entry = entries.get(name)
            if entry is None or entry[0] is not info:
                entry = entries[name] = (
                    info,
                    node_limit(info, settings),
                    tie_rank(settings.seed, name),
                )
            infos.append(info)
            limits.append(entry[1])
            ranks.append(entry[2])
        self._view = (infos, limits, ranks)
        self._last = None if node_version is None else (version, node_version)
        return self._view
