"""The node agent's Prometheus metrics, on a registry of its own (``sandman_node_agent_*``).

One registry per process: when several agent cores run in one process (devstack's runner
for a 400-node simulated cluster) they share it, and the counters add up over the nodes.
The metric types are the agent's own (daemon/node/exposition.py says why: its RSS budget).
"""

from __future__ import annotations

from .exposition import Counter, Gauge, Histogram, Registry

__all__ = ["AgentMetrics"]

_P = "sandman_node_agent"


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = r = Registry()
        self.pulls = r.add(Counter(f"{_P}_pulls", "PullImage calls by result.", ["result"]))
        self.pull_seconds = r.add(
            Histogram(
                f"{_P}_pull_seconds",
                "Duration of successful pulls.",
                buckets=(0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 900),
            )
        )
        self.pulls_in_flight = r.add(Gauge(f"{_P}_pulls_in_flight", "Pulls under way."))
        self.repulls = r.add(
            Counter(f"{_P}_repulls", "Pulls of planned images that had been ready (image GC).")
        )
        self.removed = r.add(
            Counter(f"{_P}_images_removed", "Images the agent pulled and removed when unplanned.")
        )
        self.planned = r.add(Gauge(f"{_P}_images_planned", "Images planned for the node."))
        self.ready = r.add(Gauge(f"{_P}_images_ready", "Images present on the node."))
        self.failing = r.add(
            Gauge(f"{_P}_images_failing", "Planned images whose last pull failed.")
        )
        self.lease_writes = r.add(
            Counter(f"{_P}_lease_writes", "Writes of the per-node Lease by cause.", ["cause"])
        )
        self.unhardened = r.add(
            Gauge(
                f"{_P}_nodes_unhardened",
                "Nodes failing a hardening check of their kubelet config (daemon/node/"
                "hardening.py): 1 per failed check, 0 once it passes.",
                ["check"],
            )
        )
        self.events = r.add(Counter(f"{_P}_events", "Events recorded, by reason.", ["reason"]))
        self.events_held = r.add(
            Gauge(f"{_P}_events_held", "Refused Events held to be sent again.")
        )
        self.events_dropped = r.add(
            Counter(
                f"{_P}_events_dropped",
                "Refused Events dropped, oldest first, when the held queue was full.",
                ["reason"],
            )
        )
        self.errors = r.add(
            Counter(f"{_P}_errors", "Failed calls to the runtime or the API server.", ["target"])
        )
        self.api_requests = r.add(
            Counter(
                f"{_P}_api_requests",
                "Kubernetes API calls by RBAC verb, resource and HTTP code (0: no response; "
                "a call's retries inside the client count once).",
                ["verb", "resource", "code"],
            )
        )
        self.bundle_syncs = r.add(
            Counter(f"{_P}_bundle_syncs", "Daemon bundle copies into the hostPath directory.")
        )

    def render(self) -> bytes:
        return self.registry.render()
