"""Prometheus metrics of the simulated server, in a registry of its own (no globals).

``apiserver_request_total`` is labelled by verb, resource, subresource, user and code so a
benchmark can count exactly how many writes each sandbox cost and who made them; the flow
control rejections and watch events delivered have their own counters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from simcluster.apiserver.flowcontrol import Admission, FlowControl

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
        self.dispatched = Counter(
            "apiserver_flowcontrol_dispatched_requests",
            "Requests admitted by priority level and flow schema (upstream's name).",
            ["priority_level", "flow_schema"],
            registry=self.registry,
        )
        self.wait = Histogram(
            "apiserver_flowcontrol_request_wait_duration_seconds",
            "Time admitted requests waited in their level's queue (upstream's name).",
            ["priority_level", "flow_schema", "execute"],
            buckets=(0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=self.registry,
        )
        self.nominal_seats = Gauge(
            "apiserver_flowcontrol_nominal_limit_seats",
            "A level's concurrency cap (0: unlimited) for mutating requests (upstream's name).",
            ["priority_level"],
            registry=self.registry,
        )
        self.budget_rate = Gauge(
            "simcluster_flowcontrol_budget_requests_per_second",
            "A level's token rate by request class (mutating, read); 0: unlimited.",
            ["priority_level", "class"],
            registry=self.registry,
        )
        self._flow_generation = -1
        self._flow_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self.watch_events = Counter(
            "apiserver_watch_events_sent",
            "Watch events written to clients (HTTP and in-process).",
            ["resource"],
            registry=self.registry,
        )

    def admitted(self, admission: Admission, flow: FlowControl) -> None:
        """Count an admitted request; publish the levels' budgets after a reconfiguration."""
        key = (admission.level.name, admission.schema.name)
        children = self._flow_children.get(key)
        if children is None:  # labels() costs a lock and a lookup: once per (level, schema)
            children = (self.dispatched.labels(*key), self.wait.labels(*key, "true"))
            self._flow_children[key] = children
        children[0].inc()
        children[1].observe(admission.waited_s)
        if flow.generation != self._flow_generation:
            self._flow_generation = flow.generation
            for name in flow.levels:
                mutating, read = flow.budget(name, True), flow.budget(name, False)
                self.nominal_seats.labels(name).set(mutating.concurrency)
                self.budget_rate.labels(name, "mutating").set(mutating.rate)
                self.budget_rate.labels(name, "read").set(read.rate)

    def render(self) -> bytes:
        return generate_latest(self.registry)
