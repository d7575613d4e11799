"""The soak report: Markdown (figures, RSS per process, checks), a CSV of the samples, and a
PNG of live sandboxes and RSS over time — the shape a table hides: a leak is a slope.
"""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path

from load.burst.analysis import Check
from load.faults.report import machine
from load.soak.run import SERVERS, SoakResult

__all__ = ["Check", "checks", "write_csv", "write_markdown", "write_plot"]


def checks(r: SoakResult) -> list[Check]:
    t, f = r.settings.thresholds, r.figures
    out = [
        Check("leaked", f"≤ {t.max_leaked}", str(f.leaked), f.leaked <= t.max_leaked),
        Check("lost", f"≤ {t.max_lost}", str(f.lost), f.lost <= t.max_lost),
        Check("untyped failures (sandboxes + tool calls)", f"≤ {t.max_untyped}",
              str(f.failed_untyped + r.tools.untyped),
              f.failed_untyped + r.tools.untyped <= t.max_untyped),
        Check("duplicated", "0", str(f.duplicated), f.duplicated == 0),
    ]  # fmt: skip
    if t.check_rss:
        for proc in SERVERS:
            g = r.growth.get(proc, math.nan)
            ok = not math.isnan(g) and g <= t.max_rss_growth
            out.append(Check(f"RSS growth after warm-up: {proc}", f"≤ {t.max_rss_growth:.0%}",
                             "n/a" if math.isnan(g) else f"{g:+.1%}", ok))  # fmt: skip
    return out


def _mib(x: float) -> str:
    return f"{x / 2**20:,.0f}"


def write_markdown(r: SoakResult, cks: list[Check], path: Path) -> str:
    s, f = r.settings, r.figures
    warmup = s.duration_s * s.warmup_share
    lines = [
        f"## Soak: {r.scale}",
        "",
        f"- **Command:** `{s.command}`",
        f"- **Measured:** {time.strftime('%Y-%m-%d %H:%M %Z')} on {machine()}",
        f"- Shape: `load.shapes.ChurnShape` (raised cosine, {s.base}→{s.peak} relative load, "
        f"{s.days:g} cycles) compressed into the run; one batch create per second through the "
        f"SDK ({s.workers} clients over the replicas), each sandbox released {s.hold_s:g} s "
        f"after Ready; {s.tool_workers} trainers making tool calls (session command, file "
        "write + read, exec) on real daemons.",
        f"- Warm-up: the first {warmup:,.0f} s (the facade's tombstones live 900 s); RSS growth "
        "is the median of the last tenth of the samples after it over the first tenth.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| sandboxes requested / Ready | {f.requested:,} / {f.ready:,} |",
        f"| requested → Ready p50 / max | {f.ready_p50_s:.2f} / {f.ready_max_s:.2f} s |",
        f"| lost / duplicated / leaked | {f.lost} / {f.duplicated} / {f.leaked} |",
        f"| failed, typed | {f.failed_typed:,} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(f.reasons.items())) or 'none'}) |",
        f"| failed, untyped | {f.failed_untyped} {f.untyped or ''} |",
        f"| tool calls / failed | {r.tools.calls:,} / {sum(r.tools.failed.values())} "
        f"{r.tools.failed or ''} |",
        f"| peak live sandbox pods | {r.peak_live:,} |",
    ]
    if r.samples:
        cached = [x.cached_pods for x in r.samples if not math.isnan(x.cached_pods)]
        lines.append(f"| facade's cached pods, max | {max(cached, default=math.nan):,.0f} |")
        lines.append(
            f"| controller GC deletions (all reasons) | {r.samples[-1].gc_deletions:,.0f} |"
        )
        after = [x for x in r.samples if x.t >= warmup] or r.samples
        for proc in SERVERS:
            first = next((x.rss[proc] for x in after if proc in x.rss), None)
            last = next((x.rss[proc] for x in reversed(r.samples) if proc in x.rss), None)
            if first is None or last is None:
                continue
            g = r.growth.get(proc, math.nan)
            lines.append(
                f"| RSS {proc}: end of warm-up → end, MiB (growth) | {_mib(first)} → "
                f"{_mib(last)} ({'n/a' if math.isnan(g) else f'{g:+.1%}'}) |"
            )
    lines += r.notes
    lines += ["", "| check | target | value | |", "|---|---|---|---|"]
    lines += [f"| {c.name} | {c.target} | {c.value} | {'ok' if c.ok else '**FAILED**'} |"
              for c in cks]  # fmt: skip
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def write_csv(r: SoakResult, path: Path) -> None:
    with path.open("w", newline="") as out:
        w = csv.writer(out)
        w.writerow(["t", "live", "ready_total", "cached_pods", "gc_deletions",
                    *(f"rss_{p}" for p in SERVERS)])  # fmt: skip
        for x in r.samples:
            w.writerow([f"{x.t:.1f}", x.live, x.ready_total, x.cached_pods, x.gc_deletions,
                        *(x.rss.get(p, "") for p in SERVERS)])  # fmt: skip


def write_plot(r: SoakResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (live, rss) = plt.subplots(2, 1, figsize=(9, 6), dpi=100, sharex=True)
    ts = [x.t for x in r.samples]
    live.plot(ts, [x.live for x in r.samples], label="live sandbox pods (API server)")
    live.plot(ts, [x.cached_pods for x in r.samples], ":", label="facade's cached pods")
    live.set_ylabel("sandboxes")
    live.legend(fontsize=8)
    live.grid(alpha=0.3)
    for proc in SERVERS:
        ys = [x.rss.get(proc, math.nan) / 2**20 for x in r.samples]
        rss.plot(ts, ys, label=proc)
    warmup = r.settings.duration_s * r.settings.warmup_share
    for ax in (live, rss):
        ax.axvline(warmup, color="grey", lw=0.8)
    rss.set_ylabel("RSS, MiB")
    rss.set_xlabel("seconds since the first request (grey: end of warm-up)")
    rss.legend(fontsize=8)
    rss.grid(alpha=0.3)
    fig.suptitle(f"Soak: {r.scale}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
