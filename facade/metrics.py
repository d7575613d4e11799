"""Prometheus metrics of the facade (``sandman_facade_*``), in a registry of its own.

Labels are closed sets: the route *template* (never a sandbox id), the status code, the
tenant (operator-configured, a handful) and stable failure reasons.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["FacadeMetrics"]

REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60, 300)


class FacadeMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "sandman_facade_requests",
            "HTTP requests by route template, method and status code.",
            ["route", "method", "code"],
            registry=r,
        )
        self.request_duration = Histogram(
            "sandman_facade_request_duration_seconds",
            "Time to answer a request (for streams: until the response started).",
            ["route"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.created = Counter(
            "sandman_facade_sandboxes_created", "Sandbox pods created.", ["tenant"], registry=r
        )
        self.creates = Counter(
            "sandman_facade_pod_creates",
            "Pod creates sent, by placement: pre-placed (spec.nodeName set: one write), "
            "unbound (binder mode or no placement), unbound-late (the placement ran out).",
            ["placement"],
            registry=r,
        )
        self.placement_pods = Counter(
            "sandman_facade_placement_pods",
            "Pods the facade asked the leader to place, by outcome: placed, no_room (the "
            "leader answered no node), call_failed, no_leader (kube/placement.py OUTCOMES).",
            ["outcome"],
            registry=r,
        )
        self.placement_waits = Counter(
            "sandman_facade_placement_waits",
            "Placement asks that found no leader and were repeated until one answered or "
            "leader_wait_s ran out, by outcome: answered, gave_up (the pods went unbound; "
            "kube/placement.py WAIT_OUTCOMES).",
            ["outcome"],
            registry=r,
        )
        self.placements_ran_out = Counter(
            "sandman_facade_placements_ran_out",
            "Pre-placed creates not sent because their placement ran out first (each asked "
            "for once more, or created unbound: facade/preplaced.py).",
            registry=r,
        )
        self.pool_claims = Counter(
            "sandman_facade_pool_claims",
            "Creates offered to the pooled source (facade/pooled.py), by outcome: hit (every "
            "member claimed from a pool), partial (some; the rest created cold), miss (none), "
            "failed (no leader, or the claims call failed or timed out: all cold). A retry "
            "answered with its first claim is not counted again.",
            ["outcome"],
            registry=r,
        )
        self.pool_claimed = Counter(
            "sandman_facade_pool_claimed_sandboxes",
            "Sandboxes handed out from a pool (claimed, their daemon given the claim).",
            registry=r,
        )
        self.pool_claim_seconds = Histogram(
            "sandman_facade_pool_claim_seconds",
            "Time from a create's claims call to its claimed sandboxes' daemons holding "
            "their claims.",
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.released = Counter(
            "sandman_facade_sandboxes_released",
            "Sandboxes released by trainers.",
            ["tenant"],
            registry=r,
        )
        self.admission_rejections = Counter(
            "sandman_facade_admission_rejections",
            "Creates refused by tenant admission (429/400), by reason.",
            ["tenant", "reason"],
            registry=r,
        )
        self.fair_share_refusals = Counter(
            "sandman_facade_fair_share_refusals",
            "Requests refused to share the facade fairly (facade/fairness.py: caps on calls and "
            'waits, allow-lists, the failed-login throttle with tenant ""), by reason.',
            ["tenant", "reason"],
            registry=r,
        )
        self.proxy_errors = Counter(
            "sandman_facade_proxy_errors",
            "Tool calls that failed on the hop to the sandbox daemon, by reason.",
            ["reason"],
            registry=r,
        )
        self.waiters = Gauge(
            "sandman_facade_waiters", "Requests waiting for a sandbox state.", registry=r
        )
        self.cached_pods = Gauge(
            "sandman_facade_cached_pods", "Sandbox pods in the watch caches.", registry=r
        )
