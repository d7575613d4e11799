"""The fault report: a Markdown table (one row per fault, the definitions under it), a CSV row
per requested sandbox, and a PNG of Ready-over-time per fault with the injection marked.

Why the definitions are printed into the report: a figure such as "0 lost" means nothing
without what "lost" counts; the text is ``load.faults.outcomes``' docstring, the one place
it is written.
"""

from __future__ import annotations

import csv
import math
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from load.faults import outcomes
from load.faults.run import FaultResult
from load.faults.settings import Thresholds

__all__ = ["Check", "checks", "write_csv", "write_markdown", "write_plot"]


@dataclass(frozen=True, slots=True)
class Check:
    fault: str
    name: str
    target: str
    value: str
    ok: bool


def checks(results: list[FaultResult], t: Thresholds) -> list[Check]:
    out = []
    for r in results:
        f = r.figures
        name = r.fault.name
        out += [
            Check(name, "lost", f"≤ {t.max_lost}", str(f.lost), f.lost <= t.max_lost),
            Check(name, "duplicated", f"≤ {t.max_duplicated}", str(f.duplicated),
                  f.duplicated <= t.max_duplicated),
            Check(name, "leaked", f"≤ {t.max_leaked}", str(f.leaked), f.leaked <= t.max_leaked),
            Check(name, "untyped failures", f"≤ {t.max_untyped}", str(f.failed_untyped),
                  f.failed_untyped <= t.max_untyped),
            Check(name, "fault completed", "yes", r.error or "yes", not r.error),
        ]  # fmt: skip
        if f.affected:
            value = f"{f.detected}/{f.affected}, max {_f(f.detect_max_s)} s"
            ok = f.detected == f.affected and f.detect_max_s <= t.max_detect_s
            out.append(Check(name, "detected", f"all, ≤ {t.max_detect_s:g} s", value, ok))
    return out


def _f(x: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.{digits}f}"


def _reasons(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())) or "none"


def machine() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{platform.node()} ({os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}), load average {load}"
    )


def write_markdown(results: list[FaultResult], cks: list[Check], command: str, path: Path) -> str:
    lines = [
        "## Faults: what a burst loses, duplicates and leaks under each fault",
        "",
        f"- **Command:** `{command}`",
        f"- **Measured:** {time.strftime('%Y-%m-%d %H:%M %Z')} on {machine()}",
        "- Each fault: a fresh stack (simcluster, controller(s), facade(s) as processes), a "
        "burst created through the SDK (batch creates, same-key retries), the fault injected "
        "mid-burst, then an audit (a GET per ready sandbox), a release per owner and a LIST.",
        "",
        "| fault | scale | Ready | requested → Ready p50 / max | lost | duplicated | leaked "
        "| failed, typed (reasons) | untyped | time to detect p50 / max (detected/affected) "
        "| detected when |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        f = r.figures
        detect = (
            "n/a"
            if not f.affected
            else (f"{_f(f.detect_p50_s)} / {_f(f.detect_max_s)} s ({f.detected}/{f.affected})")
        )
        lines.append(
            f"| {r.fault.name}: {r.fault.title} | {r.scale} | {f.ready:,}/{f.requested:,} "
            f"| {_f(f.ready_p50_s)} / {_f(f.ready_max_s)} s | {f.lost} | {f.duplicated} "
            f"| {f.leaked} | {f.failed_typed:,} ({_reasons(f.reasons)}) "
            f"| {f.failed_untyped} {_reasons(f.untyped) if f.untyped else ''}"
            f"| {detect} | {r.fault.detect} |"
        )
    lines += ["", "Per fault:", ""]
    for r in results:
        errors = ", ".join(f"{c}: {v:,.0f}" for c, v in r.api_errors.items())
        extra = "; ".join(r.notes + ([f"**did not complete:** {r.error}"] if r.error else []))
        at = "n/a" if r.injected_at is None else f"{r.injected_at:.2f} s"
        lines.append(
            f"- **{r.fault.name}**: injected at t = {at}; Sandman's API requests answered "
            f"{errors}{'; ' + extra if extra else ''}"
        )
    lines += ["", "Definitions (`load/faults/outcomes.py`):", ""]
    doc = outcomes.__doc__ or ""
    lines += [ln for ln in doc.split("Definitions", 1)[1].splitlines()[2:] if ln.strip()]
    lines += ["", "| fault | check | target | value | |", "|---|---|---|---|---|"]
    lines += [
        f"| {c.fault} | {c.name} | {c.target} | {c.value} | {'ok' if c.ok else '**FAILED**'} |"
        for c in cks
    ]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def write_csv(results: list[FaultResult], path: Path) -> None:
    """One row per requested sandbox of every fault (times: seconds since its first request)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["fault", "key", "sandbox_id", "requested", "ready", "ended", "outcome",
                    "reason", "typed"])  # fmt: skip
        for r in results:
            for o in r.outcomes:
                stamps = (o.requested, o.ready, o.ended)
                w.writerow([
                    r.fault.name, o.key, o.sandbox_id,
                    *("" if t is None else f"{t:.4f}" for t in stamps),
                    o.outcome, o.reason, o.typed,
                ])  # fmt: skip


def write_plot(results: list[FaultResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(results))
    cols = 2 if n > 1 else 1
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 2.8 * rows), dpi=100, squeeze=False)
    for ax, r in zip(axes.flat, results, strict=False):
        xs = [t for t, _ in r.ready_series]
        ax.plot(xs, [k for _, k in r.ready_series], label="Ready (trainer side)")
        if r.injected_at is not None:
            ax.axvline(r.injected_at, color="red", lw=1, label="fault injected")
        ax.set_title(f"{r.fault.name}: {r.scale}", fontsize=9)
        ax.set_xlabel("s since the first request", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(results) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
