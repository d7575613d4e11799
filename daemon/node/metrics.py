"""The node agent's Prometheus metrics, on a registry of its own (``sandman_node_agent_*``).

One registry per process: when several agent cores run in one process (devstack's runner
for a 400-node simulated cluster) they share it, and the counters add up over the nodes.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["AgentMetrics"]

_P = "sandman_node_agent"


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.pulls = Counter(f"{_P}_pulls", "PullImage calls by result.", ["result"], registry=r)
        self.pull_seconds = Histogram(
            f"{_P}_pull_seconds",
            "Duration of successful pulls.",
            buckets=(0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 900),
            registry=r,
        )
        self.pulls_in_flight = Gauge(f"{_P}_pulls_in_flight", "Pulls under way.", registry=r)
        self.repulls = Counter(
            f"{_P}_repulls", "Pulls of planned images that had been ready (image GC).", registry=r
        )
        self.removed = Counter(
            f"{_P}_images_removed", "Images the agent pulled and removed when unplanned.",
            registry=r,
        )  # fmt: skip
        self.planned = Gauge(f"{_P}_images_planned", "Images planned for the node.", registry=r)
        self.ready = Gauge(f"{_P}_images_ready", "Images present on the node.", registry=r)
        self.failing = Gauge(f"{_P}_images_failing", "Planned images whose last pull failed.",
                             registry=r)  # fmt: skip
        self.lease_writes = Counter(
            f"{_P}_lease_writes", "Writes of the per-node Lease by cause.", ["cause"], registry=r
        )
        self.events = Counter(f"{_P}_events", "Events recorded, by reason.", ["reason"],
                              registry=r)  # fmt: skip
        self.errors = Counter(
            f"{_P}_errors", "Failed calls to the runtime or the API server.", ["target"],
            registry=r,
        )  # fmt: skip
        self.bundle_syncs = Counter(
            f"{_P}_bundle_syncs", "Daemon bundle copies into the hostPath directory.", registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
