"""``python -m load.burst --announce --series N``: cold and announced bursts interleaved.

Why a series in one invocation: the machine is shared and noisy (BENCHMARKS.md), so a cold
figure from an hour ago says little about an announced one now. Each round runs the arms
on fresh stacks, one after the other — the cold burst, the announced one, and with
``--announce-fraction`` < 1 a cold burst of the remainder's size (its share of the
requests, at the same arrival rate: the window scaled by that share) to hold the partial
pool's remainder to — rotating which arm goes first so that drift lands on every arm. Each
run keeps its full report in ``<out>/round-<k>-<arm>/``; ``<out>/series.md`` tabulates
every run, the medians per arm and the ratios of the medians within the series.

The table's figures come from each run's own result (pure: :func:`series_row`,
:func:`series_markdown`): first request → all Ready, the last Ready after the last
request, requested → Ready p50/p99, Sandman's stored writes before all Ready per sandbox
and its CPU per sandbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from load.burst.announce_results import cpu_per_sandbox_ms, latency_stats
from load.burst.progress import say
from load.burst.report import BurstResult, write_csv, write_markdown, write_plot
from load.burst.settings import BurstSettings

__all__ = [
    "ARMS",
    "SeriesRow",
    "arms",
    "medians",
    "run_series",
    "run_series_from",
    "series_markdown",
    "series_row",
]

#: cold: the reference burst; announced: the same, announced ahead; remainder: a cold burst
#: of the announced run's unannounced share (only when there is one).
ARMS = ("cold", "announced", "remainder")


@dataclass(frozen=True, slots=True)
class SeriesRow:
    round: int
    arm: str
    sandboxes: int
    ready: int
    all_ready_s: float  # first request → last Ready
    after_last_request_s: float  # the last Ready minus the last request sent
    p50_s: float  # requested → Ready
    p99_s: float
    #: The cold rows of an announced run (its remainder): requested → Ready p50 / p99.
    remainder_p50_s: float
    remainder_p99_s: float
    writes_per_sandbox: float  # Sandman's stored writes, first request → all Ready
    cpu_ms_per_sandbox: float  # controller + facade, first request → all Ready
    ok: bool


def arms(s: BurstSettings, round_: int) -> list[tuple[str, BurstSettings]]:
    """The arms of round ``round_`` (0-based), each with its settings and report directory,
    rotated by the round so that no arm always runs first."""
    base = dataclasses.replace(s, announce=False)
    out: list[tuple[str, BurstSettings]] = [
        ("cold", base),
        ("announced", dataclasses.replace(s, announce=True)),
    ]
    rest = s.sandboxes - dataclasses.replace(s, announce=True).announced
    if rest > 0:
        share = rest / s.sandboxes
        remainder = dataclasses.replace(base, sandboxes=rest, window_s=s.window_s * share)
        out.append(("remainder", remainder))
    k = round_ % len(out)
    rotated = out[k:] + out[:k]
    return [
        (arm, dataclasses.replace(a, out=s.out / f"round-{round_ + 1:02d}-{arm}"))
        for arm, a in rotated
    ]


def series_row(round_: int, arm: str, r: BurstResult) -> SeriesRow:
    rows = [x for x in r.sandboxes if x.requested is not None]
    every = latency_stats(rows)
    ready = [x.ready for x in rows if x.ready is not None]
    done = len(ready) >= r.requested and rows
    last_request = max((x.requested for x in rows if x.requested is not None), default=math.nan)
    nan = math.nan
    cold = r.announce.cold if r.announce is not None else None
    return SeriesRow(
        round=round_,
        arm=arm,
        sandboxes=r.requested,
        ready=r.ready,
        all_ready_s=r.all_ready_s,
        after_last_request_s=max(ready) - last_request if done else nan,
        p50_s=every.p50,
        p99_s=every.p99,
        remainder_p50_s=cold.p50 if cold is not None and cold.count else nan,
        remainder_p99_s=cold.p99 if cold is not None and cold.count else nan,
        writes_per_sandbox=r.burst_writes_per_sandbox,
        cpu_ms_per_sandbox=cpu_per_sandbox_ms(r.cpu_s, r.requested),
        ok=r.ok,
    )


#: (column title, SeriesRow field, scale, digits)
_COLUMNS = (
    ("all Ready s", "all_ready_s", 1.0, 2),
    ("after last request ms", "after_last_request_s", 1000.0, 0),
    ("p50 ms", "p50_s", 1000.0, 1),
    ("p99 ms", "p99_s", 1000.0, 1),
    ("remainder p50 ms", "remainder_p50_s", 1000.0, 1),
    ("remainder p99 ms", "remainder_p99_s", 1000.0, 1),
    ("writes/sandbox", "writes_per_sandbox", 1.0, 4),
    ("CPU ms/sandbox", "cpu_ms_per_sandbox", 1.0, 2),
)


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.median(finite) if finite else math.nan


def _cell(value: float, scale: float, digits: int) -> str:
    return "n/a" if math.isnan(value) else f"{value * scale:,.{digits}f}"


def medians(rows: Sequence[SeriesRow]) -> dict[str, dict[str, float]]:
    """arm → field → the median over the arm's runs (nan-free; nan when none)."""
    out: dict[str, dict[str, float]] = {}
    for arm in ARMS:
        mine = [r for r in rows if r.arm == arm]
        if mine:
            out[arm] = {f: _median([getattr(r, f) for r in mine]) for _, f, _, _ in _COLUMNS}
    return out


def series_markdown(title: str, command: str, rows: Sequence[SeriesRow]) -> str:
    head = "| round | arm | sandboxes (Ready) | " + " | ".join(c[0] for c in _COLUMNS) + " | ok |"
    sep = "|" + "---|" * (len(_COLUMNS) + 4)
    lines = [f"## {title}", "", f"- **Command:** `{command}`", "", head, sep]
    for r in rows:
        cells = [_cell(getattr(r, f), k, d) for _, f, k, d in _COLUMNS]
        lines.append(
            f"| {r.round + 1} | {r.arm} | {r.sandboxes:,} ({r.ready:,}) | "
            + " | ".join(cells)
            + f" | {'ok' if r.ok else '**FAILED**'} |"
        )
    med = medians(rows)
    lines += ["", "Medians per arm:", "", "| arm | " + " | ".join(c[0] for c in _COLUMNS) + " |"]
    lines.append("|" + "---|" * (len(_COLUMNS) + 1))
    for arm, values in med.items():
        cells = [_cell(values[f], k, d) for _, f, k, d in _COLUMNS]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += ["", *_ratios(med)]
    return "\n".join(lines) + "\n"


def _ratio(a: float, b: float) -> str:
    return "n/a" if math.isnan(a) or math.isnan(b) or b <= 0 else f"{a / b:,.1f}x"


def _ratios(med: dict[str, dict[str, float]]) -> list[str]:
    """The ratios of medians within the series: cold / announced, and the partial pool's
    remainder against a cold burst of its size."""
    out = []
    cold, ann, rest = med.get("cold"), med.get("announced"), med.get("remainder")
    if cold and ann:
        out.append(
            "- cold / announced (medians): all Ready "
            f"{_ratio(cold['all_ready_s'], ann['all_ready_s'])}, after the last request "
            f"{_ratio(cold['after_last_request_s'], ann['after_last_request_s'])}, "
            f"requested → Ready p50 {_ratio(cold['p50_s'], ann['p50_s'])}, "
            f"p99 {_ratio(cold['p99_s'], ann['p99_s'])}"
        )
    if ann and rest:
        out.append(
            "- the partial pool's remainder / a cold burst of its size (medians): "
            f"p50 {_ratio(ann['remainder_p50_s'], rest['p50_s'])}, "
            f"p99 {_ratio(ann['remainder_p99_s'], rest['p99_s'])} (1.0x: the remainder is "
            "served as fast as a cold burst of that size)"
        )
    return out


async def run_series(s: BurstSettings, rounds: int) -> list[SeriesRow]:
    from load.burst.run import run_burst

    rows: list[SeriesRow] = []
    for k in range(rounds):
        for arm, settings in arms(s, k):
            say(f"series round {k + 1}/{rounds}: {arm} ({settings.sandboxes:,} sandboxes)")
            result = await run_burst(settings, say)
            write_markdown(result, settings.out / "report.md")
            write_csv(result.sandboxes, settings.out / "sandboxes.csv")
            write_plot(result, settings.out / "timeline.png")
            rows.append(series_row(k, arm, result))
            _write(s, rows)
    return rows


def _write(s: BurstSettings, rows: list[SeriesRow]) -> Path:
    """series.md after every run: an interrupted series keeps what it measured."""
    title = (
        f"Series: {s.sandboxes:,} sandboxes within {s.window_s:g} s on {s.profile}, cold and "
        f"{s.announce_fraction:.0%} announced, interleaved"
    )
    s.out.mkdir(parents=True, exist_ok=True)
    path = s.out / "series.md"
    path.write_text(series_markdown(title, s.command, rows))
    return path


def run_series_from(s: BurstSettings, rounds: int) -> int:
    """The command line's entry: 0 when every run passed its checks, 1 when one failed, 2
    when a run could not complete."""
    from devstack.stack import StackError

    try:
        rows = asyncio.run(run_series(s, rounds))
    except (StackError, RuntimeError) as e:
        say(f"burst series failed: {e}")
        return 2
    text = (s.out / "series.md").read_text()
    print(text)
    say(f"series report: {s.out / 'series.md'}")
    return 0 if all(r.ok for r in rows) else 1
