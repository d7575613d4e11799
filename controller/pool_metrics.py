"""The pool filler's metrics: announced and standing pools, one place.

Why a module of its own: the operator reads the pools through these names (the dashboard and
the alerts in manifests/components/monitoring are checked against them), and the filler
(controller/pools.py) only sets them. Standing pools add two gauges per (namespace, image,
class) — a handful of series: a tenant configures a few standing pools, not hundreds — and
drop a pool's series when it leaves the configuration.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.pool_plan import Announcement, PoolPod
from controller.standing import reserve
from sandman.wire.image_preparation import PreparationSpec

__all__ = ["PoolMetrics", "StandingMetrics"]


class PoolMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.pods = Gauge(
            "sandman_pool_pods",
            "Pool pods by state: starting, ready (unclaimed, on a good node), claimed, unhealthy.",
            ["state"],
            registry=registry,
        )
        self.creates = Counter(
            "sandman_pool_creates",
            "Pool pod creates by outcome: created, exists (AlreadyExists: a success), "
            "throttled (429), no_room (not placed: left for the next decision), error.",
            ["outcome"],
            registry=registry,
        )
        self.deletes = Counter(
            "sandman_pool_deletes",
            "Unclaimed pool pods deleted, by reason: expired, failed, node_lost, excess (a "
            "standing pool above its min).",
            ["reason"],
            registry=registry,
        )
        self.fill_seconds = Histogram(
            "sandman_pool_fill_seconds",
            "From the filler first seeing an announcement to every slot it wants created.",
            buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
            registry=registry,
        )


class StandingMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["namespace", "image", "class"]
        self.target = Gauge(
            "sandman_pool_standing_target",
            "A standing pool's min: the unclaimed pool sandboxes it keeps (tenant config).",
            labels,
            registry=registry,
        )
        self.short = Gauge(
            "sandman_pool_standing_short",
            "How many unclaimed pool sandboxes (starting or Ready) a standing pool lacks of "
            "its min: 0 when full; staying above 0 means quota, room or the pool level limits.",
            labels,
            registry=registry,
        )
        self._shown: set[tuple[str, str, str]] = set()

    def observe(
        self,
        pools: Iterable[tuple[Announcement, PreparationSpec | None]],
        pods: Iterable[PoolPod],
        spent: set[tuple[str, str]],
    ) -> None:
        """``pools``: the live announcements with their specs (the standing ones are shown);
        ``pods``: every pool pod, those created and not in the watch yet included."""
        by_pool: dict[tuple[str, str], list[PoolPod]] = {}
        for p in pods:
            by_pool.setdefault((p.namespace, p.pool), []).append(p)
        shown: set[tuple[str, str, str]] = set()
        for a, spec in pools:
            if a.standing is None or spec is None:
                continue
            labels = (a.namespace, a.images[0][0], spec.sandbox_class or "")
            have = reserve(by_pool.get((a.namespace, a.name), ()), spent)
            self.target.labels(*labels).set(a.standing.min)
            self.short.labels(*labels).set(max(0, a.standing.min - have))
            shown.add(labels)
        for gone in self._shown - shown:
            self.target.remove(*gone)
            self.short.remove(*gone)
        self._shown = shown
