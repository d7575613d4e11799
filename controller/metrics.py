"""Prometheus metrics of the controller, in a registry of its own (no module globals).

Names carry the ``sandman_`` prefix and base units (seconds); labels are small closed sets
(outcome, verb, code, reason), never a pod or sandbox name, so cardinality stays flat at
12,000 sandboxes.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["LATENCY_BUCKETS", "ControllerMetrics"]

#: Seconds, up to 300: a burst's slowest sandbox can wait minutes for capacity.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.pending = Gauge(
            "sandman_pending_pods", "Sandbox pods waiting to be planned or bound.", registry=r
        )
        self.unschedulable = Gauge(
            "sandman_unschedulable_pods",
            "Sandbox pods no node can take now (parked until capacity appears).",
            registry=r,
        )
        self.plan_duration = Histogram(
            "sandman_plan_duration_seconds",
            "Time to plan one batch.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
            registry=r,
        )
        self.batch_size = Histogram(
            "sandman_plan_batch_pods",
            "Pods per planned batch.",
            buckets=(1, 10, 50, 100, 250, 500, 1000, 2500),
            registry=r,
        )
        self.binds = Counter("sandman_binds", "Bind requests by outcome.", ["outcome"], registry=r)
        self.create_to_bound = Histogram(
            "sandman_pod_create_to_bound_seconds",
            "From a sandbox pod's creation to its binding (API timestamps, 1 s resolution).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.bound_to_ready = Histogram(
            "sandman_pod_bound_to_ready_seconds",
            "From binding to the pod's Ready condition (API timestamps, 1 s resolution).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.api_requests = Counter(
            "sandman_api_requests",
            "Kubernetes API requests (each attempt) by verb and HTTP code (0: no response).",
            ["verb", "code"],
            registry=r,
        )
        self.api_latency = Histogram(
            "sandman_api_request_duration_seconds",
            "Kubernetes API request latency by verb (watches: until headers).",
            ["verb"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
            registry=r,
        )
        self.throttled = Counter(
            "sandman_api_throttled",
            "429 TooManyRequests responses seen from the API server.",
            registry=r,
        )
        self.leader = Gauge(
            "sandman_leader", "1 while this process holds the leader lease.", registry=r
        )
        self.events = Counter(
            "sandman_events_recorded",
            "Kubernetes Events written (e.g. FailedScheduling, once per pod).",
            ["reason"],
            registry=r,
        )

        self.gc_deletions = Counter(
            "sandman_gc_deletions",
            "Sandbox pods deleted by the garbage collector, by reason.",
            ["reason"],
            registry=r,
        )

        self.gc_claims_deleted = Counter(
            "sandman_gc_claims_deleted",
            "SandboxClaims the garbage collector deleted once none of their pods was left "
            "(after gc.claim_grace_s: controller/claim_life.py).",
            registry=r,
        )

        self.gc_backlog = Gauge(
            "sandman_gc_backlog_pods",
            "Sandbox pods due for deletion at the collector's last pass (not yet deleted: "
            "deletes failing, or the collector's rate below the churn).",
            registry=r,
        )

        self.replacements = Counter(
            "sandman_replacements",
            "Sandboxes rejected by kubelet admission before running: replaced or exhausted.",
            ["outcome"],
            registry=r,
        )
        self._request_children: dict[tuple[str, int], tuple[Any, Any]] = {}

    def observe_request(self, verb: str, code: int, seconds: float) -> None:
        """A :class:`kube.RequestObserver`. Called for every request (each bind),
        so the labelled children are looked up once per (verb, code), not per call."""
        children = self._request_children.get((verb, code))
        if children is None:
            children = self._request_children[(verb, code)] = (
                self.api_requests.labels(verb, str(code)),
                self.api_latency.labels(verb),
            )
        children[0].inc()
        children[1].observe(seconds)
        if code == 429:
            self.throttled.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
