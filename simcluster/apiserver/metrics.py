"""Prometheus metrics of the simulated server, in a registry of its own (no globals).

``apiserver_request_total`` is labelled by verb, resource, subresource, user and code so a
benchmark can count exactly how many writes each sandbox cost and who made them; the flow
control rejections and watch events delivered have their own counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

__all__ = ["ApiMetrics"]


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "apiserver_request",
            "API requests by verb, resource, subresource, user and HTTP code.",
            ["verb", "resource", "subresource", "user", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "apiserver_request_duration_seconds",
            "Time to serve non-watch requests (including flow-control queueing).",
            ["verb", "resource"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=self.registry,
        )
        self.rejected = Counter(
            "apiserver_flowcontrol_rejected_requests",
            "Requests rejected with 429 by priority level and flow schema.",
            ["priority_level", "flow_schema"],
            registry=self.registry,
        )
        self.watch_events = Counter(
            "apiserver_watch_events_sent",
            "Watch events written to clients (HTTP and in-process).",
            ["resource"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
