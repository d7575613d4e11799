"""What one burst run's measurements come to: the result, its notes and its checks.

Kept apart from the phases that measure (``run.py``: the stack, the requests, the watch):
nothing here talks to a process. The lower bound and the stage times (``analysis.py``) are
applied to this run's profile, API counters and pod stamps, the notes say how each figure
was obtained, and the checks hold the result to the run's thresholds, so what a run
recorded can be judged again without running it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from load.burst import analysis as an
from load.burst import apf
from load.burst.analysis import Check
from load.burst.announce import Pool
from load.burst.announce_results import AnnounceResult, announce_checks, summarize
from load.burst.baseline import BUCKET_BURST
from load.burst.classes import Placement
from load.burst.cluster import RunSandboxes
from load.burst.driver import Driver, FacadeDriver
from load.burst.handover import handover_checks, summarize_handover
from load.burst.kills import FacadeKiller
from load.burst.recorder import PodRecorder
from load.burst.report import BaselineResult, BurstResult
from load.burst.settings import BurstSettings, ProfileBudget

__all__ = ["SandmanPhase", "analyse", "baseline_result", "describe_mode"]


@dataclass(slots=True)
class SandmanPhase:
    """What the Sandman phase measured, before analysis."""

    recorder: PodRecorder
    driver: Driver
    before: an.ApiCounters
    after: an.ApiCounters
    left: int
    release_s: float
    cpu_s: dict[str, float]  # CPU seconds per process, first request → all Ready
    cpu_wall_s: float  # the wall time those CPU seconds were spent in
    placement: Placement | None  # with classes: where they landed, before the release
    killed_at: float | None = None  # when the leader was SIGKILLed (the recorder's clock)
    #: The facades' pod creates by placement and placement answers (cluster.facade_counters).
    facade: dict[str, float] | None = None
    at_ready: an.ApiCounters | None = None  # the counters once every request was Ready
    pool: Pool | None = None  # --announce: the pool's watch and fill
    #: --kill-facade-at: the kill (its time, the replica, requests in flight on it).
    facade_kill: FacadeKiller | None = None
    #: The run's SandboxClaims and live sandboxes once the burst was over
    #: (cluster.run_sandboxes): the hand-over checks' side of the cluster.
    held: RunSandboxes = field(default_factory=RunSandboxes)


def describe_mode(s: BurstSettings) -> str:
    fault = "; the manifests' APF objects" if s.apf == "manifests" else ""
    if s.announce:
        fault += f"; {s.announce_fraction:.0%} announced ahead (prepare, sandboxes=True)"
    if s.kill_leader_at is not None:
        of = "of the sandboxes answered" if s.announce else "bound"
        fault += f"; leader SIGKILLed at {s.kill_leader_at:.0%} {of}, a warm standby"
    if s.kill_facade_at is not None:
        fault += (
            f"; a facade replica (of 2) SIGKILLed at {s.kill_facade_at:.0%} of the requests "
            "answered, its requests moved to the other (same Idempotency-Key)"
        )
    if s.direct:
        return "direct: pods created through the Kubernetes API, no facade" + fault
    pacing = "" if s.pacer else ", fixed client rates (--no-pacer)"
    return f"through the facade, {s.batch} per request, {s.creation} creation{pacing}" + fault


def baseline_result(recorder: PodRecorder, n: int, sample: int, start_s: float) -> BaselineResult:
    rows = list(recorder.sandboxes.values())
    bound = sorted(t for t in (r.bound for r in rows) if t is not None)
    ready = [t for t in (r.ready for r in rows) if t is not None]
    model_s = an.qps_model_s(n, start_s=start_s)
    if len(bound) < 4:
        nan = math.nan
        return BaselineResult(sample, nan, nan, nan, nan, model_s)
    rate, head_s, k = an.sustained_rate(bound)
    # Within a few bursts of the bucket the second half still spends saved tokens: no
    # sustained rate to extrapolate from.
    extrapolated = head_s + max(0, n - k) / rate + start_s if k >= 2 * BUCKET_BURST else math.nan
    return BaselineResult(
        sample=sample,
        bound_s=bound[-1],
        ready_s=max(ready) if len(ready) == sample else math.nan,
        binds_per_s=rate,
        extrapolated_s=extrapolated,
        model_s=model_s,
    )


def analyse(
    s: BurstSettings, budget: ProfileBudget, p: SandmanPhase, baseline: BaselineResult | None
) -> BurstResult:
    rows = [r for r in p.recorder.sandboxes.values() if r.requested is not None or r.bound]
    ready = [r.ready for r in rows if r.ready is not None]
    all_ready = max(ready) if len(ready) >= s.sandboxes else math.nan
    model = an.BudgetModel(
        sandboxes=s.sandboxes,
        mutating_qps=budget.mutating_qps,
        mutating_burst=budget.mutating_burst,
        container_start_s=budget.container_start_s,
        writes_per_sandbox=s.writes_per_sandbox,
        arrival_window_s=s.window_s,
        nodes=budget.nodes,
        kubelet_creation_rate=budget.creation_rate,
    )
    bound_s, which = an.lower_bound_s(model)
    if s.announce:  # the cold bound does not apply to claims (the series compares instead)
        bound_s, which = math.nan, "cold-burst"
    delta = p.after.minus(p.before)
    writes = delta.writes(budget.user) / s.sandboxes
    announced = None
    if p.pool is not None and p.at_ready is not None:
        announced = _announced(s, budget, p, p.at_ready)
        fill = p.pool.fill.after.minus(p.pool.fill.before)
        lifetime = delta.writes(budget.user) + delta.writes(budget.pool_user)
        writes = (lifetime + _sandman_writes(fill, budget)) / s.sandboxes
    result = BurstResult(
        title=f"Burst: {s.sandboxes:,} sandboxes within {s.window_s:g} s on {s.profile}"
        + (f" ({budget.nodes} nodes)" if s.nodes else ""),
        command=s.command,
        mode=describe_mode(s),
        sandboxes=rows,
        requested=s.sandboxes,
        all_ready_s=all_ready,
        lower_bound_s=bound_s,
        bound_by=which,
        efficiency=an.efficiency(bound_s, all_ready),
        stages=an.stage_stats(rows),
        binds_per_s=an.binds_per_second(r.bound for r in rows),
        writes_per_sandbox=writes,
        write_breakdown=delta.breakdown(budget.user),
        throttled_server=delta.rejected_429,
        throttled_client=p.driver.stats.throttled,
        given_up=dict(p.driver.stats.failures),
        cpu_s=p.cpu_s,
        cpu_wall_s=p.cpu_wall_s,
        cores=os.cpu_count() or 1,
        admission_rejections=delta.admission_rejections,
        left_after_release=p.left,
        release_s=p.release_s,
        notes=_notes(s, budget, model),
        baseline=baseline,
        placement=p.placement,
        dispatched_by_level=delta.dispatched,
        facade_creates=p.facade or {},
        announce=announced,
        burst_writes_per_sandbox=(
            _sandman_writes(p.at_ready.minus(p.before), budget, stored_only=True) / s.sandboxes
            if p.at_ready is not None
            else math.nan
        ),
    )
    if p.killed_at is not None:
        bound = [r.bound for r in rows]
        last = max((t for t in bound if t is not None), default=p.killed_at)
        last = max(last, p.killed_at)  # nothing bound after the kill: no stall to measure
        result.leader_killed_at_s = p.killed_at
        result.longest_stall_s = an.longest_stall_s(bound, p.killed_at, last)
    kill = p.facade_kill
    if kill is not None and kill.killed_at is not None:
        result.facade_killed_at_s, result.facade_killed = kill.killed_at, kill.killed
        result.facade_killed_in_flight = kill.in_flight
    if isinstance(p.driver, FacadeDriver):
        result.handover = summarize_handover(
            p.driver.records, p.recorder.sandboxes, p.held.claims, p.held.live,
            p.held.not_ready,
        )  # fmt: skip
    result.checks = _checks(s, result)
    if result.handover is not None:
        result.checks += handover_checks(result.handover)
    if announced is not None:
        faulted = s.kill_leader_at is not None or s.kill_facade_at is not None
        announced.checks = announce_checks(s.thresholds, announced, faulted)
        result.checks += announced.checks
    return result


def _sandman_writes(d: an.ApiCounters, b: ProfileBudget, stored_only: bool = False) -> float:
    """Sandman's writes: its processes' account and the pool filler's (``stored_only``:
    without the reviews, analysis.REVIEWS)."""
    return d.writes(b.user, stored_only=stored_only) + d.writes(
        b.pool_user, stored_only=stored_only
    )


def _announced(
    s: BurstSettings, b: ProfileBudget, p: SandmanPhase, at_ready: an.ApiCounters
) -> AnnounceResult:
    assert p.pool is not None
    fill, pods = p.pool.fill, list(p.pool.recorder.sandboxes.values())
    burst = at_ready.minus(p.before)
    fill_delta = fill.after.minus(fill.before)
    breakdown = burst.breakdown(b.user)
    for k, v in burst.breakdown(b.pool_user).items():
        breakdown[f"{k} (pools)"] = v
    claims = {
        k.removeprefix("pool_claims_total{").rstrip("}"): v
        for k, v in (p.facade or {}).items()
        if k.startswith("pool_claims_total")
    }
    claims["claimed sandboxes"] = (p.facade or {}).get("pool_claimed_sandboxes_total", 0.0)
    return summarize(
        [r for r in p.recorder.sandboxes.values() if r.requested is not None or r.bound],
        announced=fill.announced,
        requested=s.sandboxes,
        burst_writes=_sandman_writes(burst, b, stored_only=True),
        burst_breakdown=breakdown,
        claims=claims,
        pool_ready=[r.ready for r in pods if r.ready is not None],
        pool_stored=[r.seen for r in pods if r.seen is not None],
        status_filled_s=fill.status_filled_s,
        pool_level=b.pool_level,
        pool_level_qps=b.pool_qps,
        pool_level_burst=b.pool_burst,
        pool_writes=fill_delta.writes(b.pool_user),
        fill_429_by_level=fill_delta.rejected,
        claim_cpu_s=p.cpu_s,
        fill_cpu_s=fill.cpu_s,
    )


def _notes(s: BurstSettings, b: ProfileBudget, m: an.BudgetModel) -> list[str]:
    notes = [
        f"Budget of Sandman's priority level: {b.mutating_qps:g} mutating requests/s after "
        f"an initial burst of {b.mutating_burst:g}; {m.writes_needed:,} writes before Ready "
        f"({'create only' if s.writes_per_sandbox == 1 else 'create + bind'} per sandbox) → "
        f"max(0, writes - burst) / rate = "
        f"{m.api_bound_s:.1f} s; kubelets: ⌈{s.sandboxes:,} / {b.nodes}⌉ creations per node at "
        f"{b.creation_rate:g}/s → {m.kubelet_bound_s:.1f} s; container start "
        f"{b.container_start_s:g} s (image preloaded on every node: the node agent's job).",
        "Timestamps: the benchmark's monotonic clock when the pod watch first showed each "
        "transition; requested/created around the create request (with batches, created is "
        "the whole batch's response), pod seen = the first watch event of the pod.",
        "Writes: mutating requests answered < 400 by Sandman's service account (controller, "
        "facade; the benchmark's own creates in direct mode), from the API server's "
        "apiserver_request_total; the kubelets' status writes and final deletes are node "
        "traffic in their own priority level and not counted.",
    ]
    if s.kill_facade_at is not None:
        notes.append(
            "Facade kill: the facades' own counters (pod creates, placements, pool claims) "
            "are the surviving replica's, scraped before the release; the killed one's died "
            "with it. The hand-over figures are every request's answers, whichever replica "
            "gave them, and the cluster's SandboxClaims."
        )
    if s.apf == "manifests":
        notes.append(
            "APF: manifests/access/flowcontrol.yaml applied; the budget above is the sum of "
            f"the mutating rates of {', '.join(sorted(apf.sandman_levels()))} (their shares "
            "of the profile's server budget), one second of it as the burst."
        )
    if s.baseline_sample:
        notes.append(
            f"Baseline: a model of kube-scheduler's default client limit (QPS 50, burst 100), "
            f"one bind in flight, measured on a sample of {min(s.baseline_sample, s.sandboxes):,} "
            f"pods after the Sandman phase and extrapolated at its sustained rate; "
            f"not kube-scheduler itself."
        )
    return notes


def _checks(s: BurstSettings, r: BurstResult) -> list[Check]:
    t = s.thresholds
    out = [] if s.announce else [
        Check(
            "efficiency",
            f"≥ {t.min_efficiency:g}",
            f"{r.efficiency:.3f}",
            not math.isnan(r.efficiency) and r.efficiency >= t.min_efficiency,
        )
    ]  # fmt: skip
    out += [
        Check(
            "API writes per sandbox",
            f"≤ {t.max_writes_per_sandbox:g}",
            f"{r.writes_per_sandbox:.3f}",
            r.writes_per_sandbox <= t.max_writes_per_sandbox,
        ),
        Check(
            "kubelet admission rejections",
            f"≤ {t.max_admission_rejections}",
            f"{r.admission_rejections:.0f}",
            r.admission_rejections <= t.max_admission_rejections,
        ),
        Check(
            "sandboxes left after release",
            f"≤ {t.max_left_after_release}",
            str(r.left_after_release),
            r.left_after_release <= t.max_left_after_release,
        ),
    ]
    if r.placement is not None:
        wrong, unbound = len(r.placement.violations), r.placement.unbound
        out.append(
            Check(
                "sandboxes on nodes their class does not allow (unbound)",
                "0 (0)",
                f"{wrong} ({unbound})"
                + (f": {', '.join(r.placement.violations[:3])}" if wrong else ""),
                wrong == 0 and unbound == 0,
            )
        )
    if s.kill_facade_at is not None:
        out.append(
            Check(
                "a facade replica SIGKILLed during the burst",
                f"at {s.kill_facade_at:.0%} of the requests answered",
                r.facade_killed or "not killed",
                bool(r.facade_killed),
            )
        )
    if s.kill_leader_at is not None and math.isnan(r.leader_killed_at_s):
        out.append(Check("the leader SIGKILLed during the burst", "killed", "not killed", False))
    if not math.isnan(r.longest_stall_s):
        out.append(
            Check(
                "longest placement/bind stall after the leader kill",
                f"≤ {t.max_stall_s:g} s",
                f"{r.longest_stall_s:.2f} s",
                r.longest_stall_s <= t.max_stall_s,
            )
        )
    if t.require_all_ready:
        out.insert(
            0, Check("all Ready", f"{r.requested:,}", f"{r.ready:,}", r.ready >= r.requested)
        )
    return out
