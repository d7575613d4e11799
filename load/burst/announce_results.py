"""What an ``--announce`` run comes to: the fill, the claim burst, and issue 23's checks.

Pure, like ``results.py``: applied to the rows and counters a run recorded
(load/burst/announce.py), so a run can be judged again without running it, and every
formula is unit-tested (tests/load/test_announce_results.py).

The figures (docs/load.md, "--announce"):

- **requested → Ready** per sandbox, claimed and cold (the remainder) apart: a claimed row is
  Ready when its create's answer held it (its pod was Ready before); a cold row when the
  watch saw its pod Ready, as in the cold burst;
- **after the last request**: the last row Ready minus the last request sent;
- **writes during the claim burst**: Sandman's mutating requests (the controller's and the
  facade's account, and the pool filler's) answered < 400 between the first request and
  every row Ready, per sandbox requested;
- **the fill**: announcement sent → the last pool pod Ready (the pod watch), its rate, and
  the share of the pool's priority level budget it used: the pool account's writes during
  the fill / (the level's burst + its rate x the time to the last pool pod stored);
- **claims** by outcome (the facades' ``sandman_facade_pool_claims_total``);
- **Sandman's CPU** (controller + facade) per sandbox: the claim burst's per sandbox
  requested, and the fill's per sandbox announced.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from load.burst import analysis as an
from load.burst.analysis import Check
from load.burst.settings import Thresholds

__all__ = [
    "SANDMAN_PROCESSES",
    "AnnounceResult",
    "LatencyStats",
    "announce_checks",
    "announce_markdown",
    "budget_used",
    "cpu_per_sandbox_ms",
    "latency_stats",
    "summarize",
]

#: The processes whose CPU is Sandman's own (the stack's names: controller, controller-2,
#: facade, facade-2, ...).
SANDMAN_PROCESSES = ("controller", "facade")


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """requested → Ready over some rows: how many reached Ready, p50, p99, max."""

    count: int
    p50: float
    p99: float
    max: float


def latency_stats(rows: Iterable[an.SandboxTimes]) -> LatencyStats:
    """requested → Ready of the rows with both stamps (a stamp seen out of order: 0 s)."""
    values = [
        max(0.0, r.ready - r.requested)
        for r in rows
        if r.ready is not None and r.requested is not None
    ]
    top = max(values) if values else math.nan
    return LatencyStats(len(values), an.percentile(values, 50), an.percentile(values, 99), top)


def budget_used(writes: float, level_qps: float, level_burst: float, span_s: float) -> float:
    """The share of a token bucket's tokens over ``span_s`` (a full bucket at the start,
    then ``level_qps``) that ``writes`` spent; nan when the level is unbudgeted or the span
    empty."""
    if math.isinf(level_qps) or level_qps <= 0 or span_s <= 0 or math.isnan(span_s):
        return math.nan
    return writes / (level_burst + level_qps * span_s)


def cpu_per_sandbox_ms(cpu_s: Mapping[str, float], sandboxes: int) -> float:
    """Sandman's CPU (controller and facade processes, every replica) per sandbox, in ms."""
    if sandboxes <= 0:
        return math.nan
    own = sum(v for k, v in cpu_s.items() if k.split("-")[0] in SANDMAN_PROCESSES)
    return 1000 * own / sandboxes


@dataclass(slots=True)
class AnnounceResult:
    announced: int
    requested: int
    claimed: LatencyStats
    cold: LatencyStats
    every: LatencyStats
    after_last_request_s: float
    #: The cold rows' first request → their last Ready (nan without cold rows).
    remainder_span_s: float
    claim_writes_per_sandbox: float
    claim_write_breakdown: dict[str, float]
    #: "hit", "partial", "miss", "failed" → creates (and "claimed sandboxes").
    claims: dict[str, float]
    fill_s: float  # announcement sent → the last pool pod Ready (watch)
    status_filled_s: float  # → the status first said every slot Ready
    fill_rate: float  # pool pods Ready per second of fill_s
    pool_level: str
    pool_level_qps: float
    pool_writes: float
    budget_used: float
    fill_429_by_level: dict[str, float]
    claim_cpu_ms: float  # Sandman's CPU per sandbox requested, claim burst
    fill_cpu_ms: float  # per sandbox announced, fill
    checks: list[Check] = field(default_factory=list)


def summarize(
    rows: Sequence[an.SandboxTimes],
    *,
    announced: int,
    requested: int,
    burst_writes: float,
    burst_breakdown: dict[str, float],
    claims: Mapping[str, float],
    pool_ready: Sequence[float],
    pool_stored: Sequence[float],
    status_filled_s: float,
    pool_level: str,
    pool_level_qps: float,
    pool_level_burst: float,
    pool_writes: float,
    fill_429_by_level: dict[str, float],
    claim_cpu_s: Mapping[str, float],
    fill_cpu_s: Mapping[str, float],
) -> AnnounceResult:
    """The announce figures of one run. ``rows``: the burst's rows (claimed ones marked);
    ``pool_ready``/``pool_stored``: each pool pod's Ready / first-seen time on the fill's
    clock (0 = the announcement sent)."""
    claimed = [r for r in rows if r.claimed]
    cold = [r for r in rows if not r.claimed]
    requests = [r.requested for r in rows if r.requested is not None]
    ready = [r.ready for r in rows if r.ready is not None]
    done = len(ready) >= requested and requests
    cold_requests = [r.requested for r in cold if r.requested is not None]
    cold_ready = [r.ready for r in cold if r.ready is not None]
    fill_s = max(pool_ready) if len(pool_ready) >= announced and pool_ready else math.nan
    last_stored = max(pool_stored) if len(pool_stored) >= announced and pool_stored else math.nan
    return AnnounceResult(
        announced=announced,
        requested=requested,
        claimed=latency_stats(claimed),
        cold=latency_stats(cold),
        every=latency_stats(rows),
        after_last_request_s=max(ready) - max(requests) if done else math.nan,
        remainder_span_s=(
            max(cold_ready) - min(cold_requests)
            if cold_requests and len(cold_ready) >= len(cold_requests)
            else math.nan
        ),
        claim_writes_per_sandbox=burst_writes / requested,
        claim_write_breakdown=dict(burst_breakdown),
        claims={k: v for k, v in claims.items()},
        fill_s=fill_s,
        status_filled_s=status_filled_s,
        fill_rate=announced / fill_s if fill_s > 0 else math.nan,
        pool_level=pool_level,
        pool_level_qps=pool_level_qps,
        pool_writes=pool_writes,
        budget_used=budget_used(pool_writes, pool_level_qps, pool_level_burst, last_stored),
        fill_429_by_level={k: v for k, v in fill_429_by_level.items() if v},
        claim_cpu_ms=cpu_per_sandbox_ms(claim_cpu_s, requested),
        fill_cpu_ms=cpu_per_sandbox_ms(fill_cpu_s, announced),
    )


def _at_most(name: str, limit: float, value: float, unit: str = " s", digits: int = 3) -> Check:
    shown = "n/a" if math.isnan(value) else f"{value:.{digits}f}{unit}"
    return Check(name, f"≤ {limit:g}{unit}", shown, not math.isnan(value) and value <= limit)


def announce_checks(t: Thresholds, a: AnnounceResult, faulted: bool = False) -> list[Check]:
    """Issue 23's targets. The claimed rows' latencies only when every request could be
    claimed (a partial pool's remainder is cold by design; it is compared in the series);
    the budget check only when the pool's level is budgeted on this profile. With a process
    killed during the burst (``faulted``) the members it left cold are the fallback, counted
    (load/burst/handover.py holds that run to its own targets): all claimed, all Ready
    soon after the last request and the claims' writes are not checked then."""
    out = []
    if a.claimed.count:
        out += [
            _at_most("claimed requested → Ready p50", t.max_claimed_p50_s, a.claimed.p50),
            _at_most("claimed requested → Ready p99", t.max_claimed_p99_s, a.claimed.p99),
        ]
    if not faulted:
        out += _unfaulted_checks(t, a)
    if not math.isnan(a.budget_used):
        out.append(
            Check(
                f"pool level ({a.pool_level}) budget used by the fill",
                f"≥ {t.min_fill_budget_used:.0%}",
                f"{a.budget_used:.0%}",
                a.budget_used >= t.min_fill_budget_used,
            )
        )
    return out


def _unfaulted_checks(t: Thresholds, a: AnnounceResult) -> list[Check]:
    return [
        Check(
            "sandboxes claimed from the pool",
            f"{min(a.announced, a.requested):,}",
            f"{a.claimed.count:,}",
            a.claimed.count >= min(a.announced, a.requested),
        ),
        _at_most(
            "all Ready after the last request",
            t.max_after_last_request_s,
            a.after_last_request_s,
        ),
        _at_most(
            "API writes per sandbox during the claim burst"
            if a.cold.count == 0
            else "API writes per claimed sandbox during the burst (cold ones: 1 each)",
            t.max_claim_writes_per_sandbox,
            _claim_writes(a),
            unit="",
            digits=4,
        ),
    ]


def _claim_writes(a: AnnounceResult) -> float:
    """The claim burst's writes per claimed sandbox, the cold remainder's creates (one
    each, pre-placed) taken out: what the claims cost."""
    if a.claimed.count == 0:
        return math.nan
    claims = a.claim_writes_per_sandbox * a.requested - a.cold.count
    return max(0.0, claims) / a.claimed.count


def _f(x: float, digits: int = 3) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.{digits}f}"


def _ms(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{1000 * x:,.1f} ms"


def announce_markdown(a: AnnounceResult) -> list[str]:
    """The report's announced section (Markdown lines)."""
    level = a.pool_level or "unbudgeted on this profile"
    rate = "" if math.isinf(a.pool_level_qps) else f", {a.pool_level_qps:g} writes/s"
    lines = [
        "",
        f"### Announced pool: {a.announced:,} of {a.requested:,} sandboxes",
        "",
        "| figure | value |",
        "|---|---|",
        f"| fill: announcement sent → last pool pod Ready (watch) / status filled "
        f"| {_f(a.fill_s, 1)} s / {_f(a.status_filled_s, 1)} s |",
        f"| fill rate | {_f(a.fill_rate, 1)} pool pods/s |",
        f"| pool level ({level}{rate}): its budget used by the fill "
        f"| {'n/a' if math.isnan(a.budget_used) else f'{a.budget_used:.0%}'} "
        f"({a.pool_writes:,.0f} writes) |",
        "| 429s during the fill, by level | "
        + (", ".join(f"{k} {v:,.0f}" for k, v in sorted(a.fill_429_by_level.items())) or "none")
        + " |",
        f"| claims: {', '.join(f'{k} {v:,.0f}' for k, v in sorted(a.claims.items())) or 'none'} "
        f"| (creates by outcome; sandboxes claimed) |",
        "| requested → Ready, claimed (n, p50, p99, max) "
        f"| {a.claimed.count:,}, {_ms(a.claimed.p50)}, {_ms(a.claimed.p99)}, "
        f"{_ms(a.claimed.max)} |",
        "| requested → Ready, cold remainder (n, p50, p99, max) "
        f"| {a.cold.count:,}, {_ms(a.cold.p50)}, {_ms(a.cold.p99)}, {_ms(a.cold.max)} |",
        f"| requested → Ready, every sandbox (p50, p99) | {_ms(a.every.p50)}, {_ms(a.every.p99)} |",
        f"| all Ready after the last request | {_ms(a.after_last_request_s)} |",
        f"| cold remainder: its first request → its last Ready | {_f(a.remainder_span_s, 2)} s |",
        f"| API writes during the claim burst, per sandbox requested "
        f"| {a.claim_writes_per_sandbox:.4f} |",
        f"| Sandman's CPU (controller + facade) per sandbox: claim burst / fill "
        f"| {_f(a.claim_cpu_ms, 2)} ms / {_f(a.fill_cpu_ms, 2)} ms |",
    ]
    if a.claim_write_breakdown:
        lines += ["", "Sandman's writes during the claim burst:", ""]
        lines += [f"- {k}: {v:,.0f}" for k, v in a.claim_write_breakdown.items() if v]
    return lines
