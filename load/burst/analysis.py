"""Pure analysis of a burst run: per-sandbox stage times, percentiles, the lower bound on
time to all-Ready, efficiency, the kube-scheduler QPS-50 model and API counters.

Why a module of its own: these formulas are the benchmark's claims (docs/load.md). Kept free
of I/O and clocks they are unit-tested on hand-computed cases, and the report, the CI-scale
test and BENCHMARKS.md all read the same numbers.

Times are seconds on the benchmark's monotonic clock, relative to the first request sent.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "MILESTONES",
    "STAGES",
    "ApiCounters",
    "BudgetModel",
    "Check",
    "SandboxTimes",
    "StageStats",
    "binds_per_second",
    "count_series",
    "efficiency",
    "longest_stall_s",
    "lower_bound_s",
    "parse_metrics",
    "parse_samples",
    "percentile",
    "qps_model_s",
    "stage_stats",
    "sustained_rate",
]

#: The transitions recorded per sandbox, in order. ``created`` is when the create request's
#: response arrived (for a batch: the whole batch's response); ``seen`` is when the pod watch
#: first showed the pod object, i.e. when the API server had stored it.
MILESTONES = ("requested", "seen", "created", "bound", "running", "ready")
#: Stage name → (from milestone, to milestone).
STAGES: dict[str, tuple[str, str]] = {
    "requested → created": ("requested", "created"),
    "requested → pod seen": ("requested", "seen"),
    "pod seen → bound": ("seen", "bound"),
    "created → bound": ("created", "bound"),
    "bound → running": ("bound", "running"),
    "running → ready": ("running", "ready"),
    "requested → bound": ("requested", "bound"),
    "requested → ready": ("requested", "ready"),
}
MUTATING_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
#: Resources whose create is a question, answered and not stored (no object, no etcd write).
REVIEWS = frozenset({"tokenreviews", "subjectaccessreviews", "selfsubjectaccessreviews",
                     "localsubjectaccessreviews", "selfsubjectreviews"})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Check:
    """One pass/fail line of a report: what was measured against its target."""

    name: str
    target: str
    value: str
    ok: bool


@dataclass(slots=True)
class SandboxTimes:
    """When each transition of one sandbox was first seen (None: never)."""

    id: str
    requested: float | None = None
    seen: float | None = None
    created: float | None = None
    bound: float | None = None
    running: float | None = None
    ready: float | None = None
    deleted: float | None = None
    node: str = ""
    failed: str = ""  # the failure reason, if the pod ended Failed
    #: Handed out from an announced pool: its pod was created and Ready before the request,
    #: so ``ready`` is when the request's answer held it (load/burst/announce.py) and the
    #: pod's own stages (seen, bound, running) belong to the fill, not to this row.
    claimed: bool = False

    def at(self, milestone: str) -> float | None:
        value: float | None = getattr(self, milestone)
        return value


@dataclass(frozen=True, slots=True)
class StageStats:
    name: str
    count: int
    p50: float
    p90: float
    p99: float
    max: float


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); ``q`` in [0, 100]."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def stage_stats(sandboxes: Iterable[SandboxTimes]) -> list[StageStats]:
    """p50/p90/p99/max of every stage over the sandboxes that reached both ends.

    A stage can be observed out of order (with batch creates the watch may show a pod bound
    before its batch's response arrived); such a stage counts as 0 s, not negative."""
    rows = list(sandboxes)
    out = []
    for name, (a, b) in STAGES.items():
        values = []
        for s in rows:
            start, end = s.at(a), s.at(b)
            if start is not None and end is not None:
                values.append(max(0.0, end - start))
        out.append(
            StageStats(
                name,
                len(values),
                percentile(values, 50),
                percentile(values, 90),
                percentile(values, 99),
                max(values) if values else math.nan,
            )
        )
    return out


def count_series(times: Iterable[float | None], step_s: float, end_s: float) -> list[int]:
    """Cumulative count of events at t = 0, step, 2·step, ... up to ``end_s`` inclusive."""
    ordered = sorted(t for t in times if t is not None)
    n_steps = math.floor(end_s / step_s) + 1
    out, i = [], 0
    for k in range(n_steps):
        t = k * step_s
        while i < len(ordered) and ordered[i] <= t:
            i += 1
        out.append(i)
    return out


def binds_per_second(bound: Iterable[float | None], width_s: float = 1.0) -> list[int]:
    """Binds seen in each ``width_s`` window [k·w, (k+1)·w), from t = 0 to the last bind."""
    times = [t for t in bound if t is not None and t >= 0]
    if not times:
        return []
    out = [0] * (int(max(times) // width_s) + 1)
    for t in times:
        out[int(t // width_s)] += 1
    return out


@dataclass(frozen=True, slots=True)
class BudgetModel:
    """What bounds time to all-Ready: the mutating budget of the requester's priority level,
    the kubelets' creation rate, one container start, and when the requests arrived."""

    sandboxes: int
    mutating_qps: float  # the priority level's mutating budget (requests/s)
    container_start_s: float
    #: The level's bucket size: tokens spent at once before the rate applies (simcluster's
    #: ``Budget.burst``; a full bucket when the run starts).
    mutating_burst: float = 0.0
    writes_per_sandbox: int = 2  # create + bind before Ready (the delete comes after)
    arrival_window_s: float = 0.0  # the last request is sent this long after the first
    nodes: int = 0  # 0: no kubelet term
    kubelet_creation_rate: float = 0.0  # sandboxes/s per node; 0: unlimited

    @property
    def writes_needed(self) -> int:
        return self.sandboxes * self.writes_per_sandbox

    @property
    def api_bound_s(self) -> float:
        """The writes the bucket cannot cover at once, at the budget's rate (never earlier
        than the last request's arrival): max(0, writes - burst) / rate.

        The server's token bucket starts full, so the first ``mutating_burst`` writes cost no
        time; leaving them out made the bound ~1 s too high on paper-burst (500 tokens at
        500/s) and a run could beat it (efficiency 1.01)."""
        paced = max(0.0, self.writes_needed - self.mutating_burst) / self.mutating_qps
        return max(paced, self.arrival_window_s)

    @property
    def kubelet_bound_s(self) -> float:
        """The fullest node must create ⌈N / nodes⌉ sandboxes at its creation rate."""
        if self.nodes <= 0 or self.kubelet_creation_rate <= 0:
            return 0.0
        return math.ceil(self.sandboxes / self.nodes) / self.kubelet_creation_rate


def lower_bound_s(model: BudgetModel) -> tuple[float, str]:
    """The lower bound on time to all-Ready and which term binds (``api`` or ``kubelet``).

    Both terms are lower bounds, so their maximum is one; on paper-burst the API term binds
    ((23,716 - 500) writes / 500/s = 46.4 s vs 30 starts per node / 4.5/s = 6.7 s)."""
    api, kubelet = model.api_bound_s, model.kubelet_bound_s
    which = "api" if api >= kubelet else "kubelet"
    return max(api, kubelet) + model.container_start_s, which


def longest_stall_s(times: Iterable[float | None], since: float, until: float) -> float:
    """The longest time without an event in [since, until]: from ``since`` (a fault) to the
    first event after it, between events, and from the last one to ``until``, if events
    were still due then (``until`` = the last event: nothing was due after it)."""
    after = sorted(t for t in times if t is not None and since <= t <= until)
    edges = [since, *after, until]
    return max(b - a for a, b in itertools.pairwise(edges))


def efficiency(lower_bound: float, actual: float) -> float:
    """lower bound / actual (1.0 = at the bound); nan when nothing became Ready."""
    if actual <= 0 or math.isnan(actual):
        return math.nan
    return lower_bound / actual


def sustained_rate(times: Sequence[float]) -> tuple[float, float, int]:
    """The rate over the second half of sorted event ``times`` — past a token bucket's
    initial burst once the sample is a few bursts long — and where that half starts:
    ``(rate, time of event k, k)``. Extrapolating to n events: ``t_k + (n - k) / rate``."""
    k = len(times) // 2
    tail = times[k - 1 :]
    rate = (len(tail) - 1) / max(tail[-1] - tail[0], 1e-9)
    return rate, times[k - 1], k


def qps_model_s(sandboxes: int, qps: float = 50.0, burst: int = 100, start_s: float = 0.0) -> float:
    """Time to bind ``sandboxes`` pods one bind per token of a client-side token bucket
    (kube-scheduler's default client: QPS 50, burst 100), plus one container start."""
    return max(0.0, (sandboxes - burst) / qps) + start_s


@dataclass(slots=True)
class ApiCounters:
    """``apiserver_request_total`` and friends, parsed from simcluster's /metrics."""

    requests: dict[tuple[str, str, str, str, str], float] = field(default_factory=dict)
    rejected_429: float = 0.0  # apiserver_flowcontrol_rejected_requests_total, all levels
    admission_rejections: float = 0.0  # simcluster_kubelet_admission_rejections_total
    #: priority level -> requests dispatched (apiserver_flowcontrol_dispatched_requests_total)
    dispatched: dict[str, float] = field(default_factory=dict)
    #: priority level -> 429s (the rejections counter per level)
    rejected: dict[str, float] = field(default_factory=dict)

    def writes(self, user: str, ok_only: bool = True, stored_only: bool = False) -> float:
        """Mutating requests by ``user`` (only those answered < 400 when ``ok_only``; with
        ``stored_only``, not the reviews, which are creates the server answers and never
        stores)."""
        return sum(
            v
            for (verb, res, _, u, code), v in self.requests.items()
            if u == user
            and verb in MUTATING_VERBS
            and (not ok_only or int(code) < 400)
            and not (stored_only and res in REVIEWS)
        )

    def breakdown(self, user: str) -> dict[str, float]:
        """``"create pods 201"`` → count, for the mutating requests of ``user``."""
        out: dict[str, float] = {}
        for (verb, res, sub, u, code), v in sorted(self.requests.items()):
            if u == user and verb in MUTATING_VERBS:
                key = f"{verb} {res}{'/' + sub if sub else ''} {code}"
                out[key] = out.get(key, 0.0) + v
        return out

    def code_count(self, code: str, user: str | None = None) -> float:
        return sum(
            v
            for (_, _, _, u, c), v in self.requests.items()
            if c == code and (user is None or u == user)
        )

    def minus(self, before: ApiCounters) -> ApiCounters:
        """The counts accrued since ``before`` (counters only grow)."""
        return ApiCounters(
            {k: v - before.requests.get(k, 0.0) for k, v in self.requests.items()},
            self.rejected_429 - before.rejected_429,
            self.admission_rejections - before.admission_rejections,
            {k: v - before.dispatched.get(k, 0.0) for k, v in self.dispatched.items()},
            {k: v - before.rejected.get(k, 0.0) for k, v in self.rejected.items()},
        )


_SAMPLE = re.compile(r"^(\w+)(?:\{([^}]*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_samples(text: str) -> Iterator[tuple[str, Mapping[str, str], float]]:
    """(metric name, labels, value) of every sample of a Prometheus text (labels ``{}``
    for a sample without any)."""
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            yield m.group(1), _labels(m.group(2) or ""), float(m.group(3))


def parse_metrics(text: str) -> ApiCounters:
    """The counters the report needs, from Prometheus text exposition."""
    out = ApiCounters()
    for name, labels, value in parse_samples(text):
        if name == "apiserver_request_total":
            get = labels.get
            key = (get("verb", ""), get("resource", ""), get("subresource", ""), get("user", ""))
            out.requests[(*key, get("code", ""))] = value
        elif name == "apiserver_flowcontrol_rejected_requests_total":
            out.rejected_429 += value
            level = labels.get("priority_level", "")
            out.rejected[level] = out.rejected.get(level, 0.0) + value
        elif name == "apiserver_flowcontrol_dispatched_requests_total":
            level = labels.get("priority_level", "")
            out.dispatched[level] = out.dispatched.get(level, 0.0) + value
        elif name == "simcluster_kubelet_admission_rejections_total":
            out.admission_rejections += value
    return out


def _labels(text: str) -> Mapping[str, str]:
    return dict(_LABEL.findall(text))
