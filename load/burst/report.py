"""The burst report: a Markdown summary, a CSV row per sandbox and a PNG timeline.

Why these three: the Markdown is what goes into BENCHMARKS.md, the CSV lets anyone redo the
analysis (every stamp is there), and the timeline shows the shape of the burst —
requested, bound and Ready over time — which a percentile table hides.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from load.burst.analysis import MILESTONES, Check, SandboxTimes, StageStats, count_series
from load.burst.announce_results import AnnounceResult, announce_markdown
from load.burst.classes import Placement
from load.burst.handover import Handover, handover_markdown

__all__ = ["BaselineResult", "BurstResult", "write_csv", "write_markdown", "write_plot"]


@dataclass(frozen=True, slots=True)
class BaselineResult:
    sample: int  # pods the real one-at-a-time binder bound
    bound_s: float  # its first to last bind
    ready_s: float  # first request to last Ready of the sample
    binds_per_s: float
    extrapolated_s: float  # the whole burst at that rate, plus one container start
    model_s: float  # the analytic QPS-50/burst-100 model for the whole burst


@dataclass(slots=True)
class BurstResult:
    title: str
    command: str
    mode: str  # "facade" or "direct"
    sandboxes: list[SandboxTimes]
    requested: int
    all_ready_s: float  # first request to last Ready (nan if not all Ready)
    lower_bound_s: float
    bound_by: str
    efficiency: float
    stages: list[StageStats]
    binds_per_s: list[int]
    writes_per_sandbox: float
    write_breakdown: dict[str, float]
    throttled_server: float  # 429s from flow control, whole Sandman phase
    throttled_client: int  # 429s the driver saw
    given_up: dict[str, int]  # reason → sandbox requests the driver gave up on
    admission_rejections: float
    left_after_release: int
    release_s: float
    cpu_s: dict[str, float] = field(default_factory=dict)  # process → CPU s, burst to Ready
    cpu_wall_s: float = math.nan  # the wall time the cpu_s were measured over
    cores: int = 1  # of this machine
    notes: list[str] = field(default_factory=list)
    baseline: BaselineResult | None = None
    placement: Placement | None = None  # with --classes: sandboxes per class and pool
    checks: list[Check] = field(default_factory=list)
    leader_killed_at_s: float = math.nan  # --kill-leader-at: when (the run's clock)
    longest_stall_s: float = math.nan  # the longest time without a bind/placement after it
    #: priority level -> requests it dispatched during the Sandman phase (all accounts)
    dispatched_by_level: dict[str, float] = field(default_factory=dict)
    #: "<counter>{<label>}" -> the facades' own count (load/burst/cluster.py)
    facade_creates: dict[str, float] = field(default_factory=dict)
    #: --announce: the fill and the claim burst (load/burst/announce_results.py)
    announce: AnnounceResult | None = None
    #: Sandman's stored writes from the first request to every sandbox Ready, per sandbox
    #: (the release's deletes and the reviews not counted)
    burst_writes_per_sandbox: float = math.nan
    #: --kill-facade-at: when (the run's clock), which replica, its requests in flight then
    facade_killed_at_s: float = math.nan
    facade_killed: str = ""
    facade_killed_in_flight: int = 0
    #: Every request's answers held to "0 handed twice, 0 lost" (load/burst/handover.py)
    handover: Handover | None = None

    @property
    def ready(self) -> int:
        return sum(1 for s in self.sandboxes if s.ready is not None)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def _f(x: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.{digits}f}"


def _reasons(counts: dict[str, int]) -> str:
    if not counts:
        return ""
    return "(" + ", ".join(f"{k}: {v:,}" for k, v in sorted(counts.items())) + ") "


def write_markdown(r: BurstResult, path: Path) -> str:
    lines = [f"## {r.title}", "", f"- **Command:** `{r.command}`", f"- **Path:** {r.mode}"]
    lines += [f"- {n}" for n in r.notes]
    lines += [
        "",
        "| figure | value |",
        "|---|---|",
        f"| sandboxes requested / Ready | {r.requested:,} / {r.ready:,} |",
        f"| time to all-Ready (first request → last Ready) | {_f(r.all_ready_s)} s |",
        f"| lower bound ({r.bound_by} term + one container start) | {_f(r.lower_bound_s)} s |",
        f"| **efficiency** (lower bound / actual) | **{_f(r.efficiency)}** |",
        f"| API writes per sandbox lifecycle (Sandman's service account, 2xx) "
        f"| {_f(r.writes_per_sandbox)} |",
        f"| of which stored before all Ready (first request → all Ready, no reviews) "
        f"| {_f(r.burst_writes_per_sandbox, 4)} |",
        f"| 429s: flow control (server) / seen by the requester | "
        f"{r.throttled_server:,.0f} / {r.throttled_client:,} |",
        f"| requests given up by the requester | {sum(r.given_up.values()):,} "
        f"{_reasons(r.given_up)}|",
        f"| kubelet admission rejections | {r.admission_rejections:,.0f} |",
        f"| sandboxes left after release | {r.left_after_release:,} "
        f"(release took {_f(r.release_s, 1)} s) |",
        f"| peak binds/s (1 s windows) | {max(r.binds_per_s, default=0):,} |",
        *(
            [
                f"| leader SIGKILLed at / longest placement or bind stall after it | "
                f"{_f(r.leader_killed_at_s, 1)} s / **{_f(r.longest_stall_s)} s** |"
            ]
            if not math.isnan(r.leader_killed_at_s)
            else []
        ),
        *(
            [
                f"| facade replica SIGKILLed at ({r.facade_killed}; requests in flight on it) "
                f"| {_f(r.facade_killed_at_s, 2)} s ({r.facade_killed_in_flight:,}) |"
            ]
            if r.facade_killed
            else []
        ),
        "| CPU seconds, first request → all Ready | "
        + ", ".join(f"{k} {v:.1f}" for k, v in r.cpu_s.items())
        + " |",
        *_cpu_bound_rows(r),
    ]
    if r.baseline is not None:
        b = r.baseline
        lines += [
            f"| baseline, one bind at a time under QPS 50 / burst 100 (measured on "
            f"{b.sample:,} pods) | {_f(b.binds_per_s, 1)} binds/s; sample Ready in "
            f"{_f(b.ready_s, 1)} s |",
            f"| baseline extrapolated to {r.requested:,} (measured rate + one start) "
            f"| {_f(b.extrapolated_s, 1)} s |",
            f"| baseline, analytic QPS-50 model | {_f(b.model_s, 1)} s |",
            "| **ratio** baseline / Sandman (extrapolated; model) | "
            f"**{_f(b.extrapolated_s / r.all_ready_s, 1)}x**; "
            f"{_f(b.model_s / r.all_ready_s, 1)}x |",
        ]
    lines += ["", "| stage | n | p50 s | p90 s | p99 s | max s |", "|---|---|---|---|---|---|"]
    for s in r.stages:
        lines.append(
            f"| {s.name} | {s.count:,} | {_f(s.p50, 3)} | {_f(s.p90, 3)} | "
            f"{_f(s.p99, 3)} | {_f(s.max, 3)} |"
        )
    if r.placement is not None:
        lines += ["", "Sandboxes per class and node pool (the pods, once all were Ready):", ""]
        lines += [r.placement.markdown()]
    lines += ["", "Writes by Sandman's service account during the run (verb, resource, code):", ""]
    lines += [f"- {k}: {v:,.0f}" for k, v in r.write_breakdown.items()]
    if r.facade_creates:
        lines += ["", "The facades' pod creates by placement; placement answers by outcome:"]
        lines += [""]
        lines += [f"- {k}: {v:,.0f}" for k, v in r.facade_creates.items() if v]
    if r.dispatched_by_level:
        lines += ["", "Requests dispatched per priority level during the run (all users):", ""]
        lines += [f"- {k}: {v:,.0f}" for k, v in sorted(r.dispatched_by_level.items()) if v]
    if r.announce is not None:
        lines += announce_markdown(r.announce)
    if r.handover is not None:
        lines += handover_markdown(r.handover)
    if r.checks:
        lines += ["", "| check | target | value | |", "|---|---|---|---|"]
        lines += [
            f"| {c.name} | {c.target} | {c.value} | {'ok' if c.ok else '**FAILED**'} |"
            for c in r.checks
        ]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def _cpu_bound_rows(r: BurstResult) -> list[str]:
    """Whether the run was bound by this machine rather than by the API budget: the share
    of its cores the stack and the benchmark kept busy, and of simcluster's one event loop
    (the API server and every simulated kubelet: one core at most)."""
    if not r.cpu_s or not r.cpu_wall_s > 0:
        return []
    busy = sum(r.cpu_s.values()) / (r.cores * r.cpu_wall_s)
    loop = r.cpu_s.get("simcluster", math.nan) / r.cpu_wall_s
    return [
        f"| CPU-bound? cores kept busy (of {r.cores}) / simcluster's event loop busy "
        f"| {busy:.0%} / {_f(100 * loop, 0)}% |"
    ]


def write_csv(sandboxes: list[SandboxTimes], path: Path) -> None:
    """One row per sandbox: the stamps (seconds since the first request), node, failure."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", *MILESTONES, "deleted", "node", "failed", "claimed"])
        for s in sorted(sandboxes, key=lambda s: (s.requested is None, s.requested or 0, s.id)):
            stamps = [s.at(m) for m in (*MILESTONES, "deleted")]
            w.writerow([
                s.id, *("" if t is None else f"{t:.4f}" for t in stamps), s.node, s.failed,
                "1" if s.claimed else "",
            ])  # fmt: skip


def write_plot(r: BurstResult, path: Path) -> None:
    """Requested, created, bound and Ready sandboxes over time (cumulative)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ends = [t for s in r.sandboxes for t in (s.ready, s.bound, s.requested) if t is not None]
    end = max(ends, default=1.0)
    step = max(end / 500, 0.05)
    xs = [k * step for k in range(int(end / step) + 1)]
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    lines = (
        ("requested", ":", "requested"),
        ("seen", "-", "pod stored (watch)"),
        ("created", "--", "create response"),
        ("bound", "-", "bound"),
        ("ready", "-", "Ready"),
    )
    for milestone, style, label in lines:
        ys = count_series((s.at(milestone) for s in r.sandboxes), step, end)
        ax.plot(xs, ys[: len(xs)], style, label=label)
    if not math.isnan(r.lower_bound_s):
        ax.axvline(r.lower_bound_s, color="grey", lw=0.8, label="lower bound")
    ax.set_xlabel("seconds since the first request")
    ax.set_ylabel("sandboxes")
    ax.set_title(f"{r.title}: efficiency {_f(r.efficiency)}")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
