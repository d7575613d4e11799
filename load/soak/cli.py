"""Command line of the soak: ``python -m load.soak`` (``make bench-soak``).

Exit code: 0 when every check passed (no leak, nothing lost or duplicated, every failure
typed, server RSS flat after the warm-up), 1 when one failed, 2 when the run could not
complete.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shlex
import sys
import time
from pathlib import Path

from load.soak.settings import SMOKE, SoakSettings, SoakThresholds

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    d, t = SoakSettings(out=Path(".")), SoakThresholds()
    p = argparse.ArgumentParser(prog="python -m load.soak", description=__doc__)
    p.add_argument(
        "--smoke",
        action="store_true",
        help=f"a small run (~90 s): {', '.join(f'{k}={v}' for k, v in SMOKE.items())}",
    )
    p.add_argument("--sandboxes", type=int, help=f"total over the run (default {d.sandboxes:,})")
    p.add_argument("--duration", type=float, help=f"seconds (default {d.duration_s:g})")
    p.add_argument("--nodes", type=int, help="override the profile's node count")
    p.add_argument("--hold", type=float, help=f"seconds a sandbox lives after Ready ({d.hold_s:g})")
    p.add_argument("--days", type=float, help=f"churn cycles in the run ({d.days:g})")
    p.add_argument("--tool-workers", type=int, default=d.tool_workers)
    p.add_argument("--workers", type=int, default=d.workers, help="SDK clients")
    p.add_argument("--max-rss-growth", type=float, default=t.max_rss_growth)
    p.add_argument("--no-rss-check", action="store_true", help="report RSS, do not judge it")
    p.add_argument("--out", help="report directory (default build/bench-soak/<time>)")
    return p  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from devstack.stack import StackError
    from load.burst.progress import say
    from load.soak.report import checks, write_csv, write_markdown, write_plot
    from load.soak.run import run_soak

    args = sys.argv[1:] if argv is None else argv
    a = _parser().parse_args(args)
    out = Path(a.out or f"build/bench-soak/{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    chosen = {
        "sandboxes": a.sandboxes, "duration_s": a.duration, "nodes": a.nodes,
        "hold_s": a.hold, "days": a.days,
    }  # fmt: skip
    values = {**(SMOKE if a.smoke else {}), **{k: v for k, v in chosen.items() if v is not None}}
    s = dataclasses.replace(
        SoakSettings(out=out),
        **values,
        tool_workers=a.tool_workers,
        workers=a.workers,
        thresholds=SoakThresholds(max_rss_growth=a.max_rss_growth, check_rss=not a.no_rss_check),
        command="python -m load.soak " + shlex.join(args),
    )
    try:
        result = asyncio.run(run_soak(s, say))
    except (StackError, RuntimeError) as e:
        say(f"soak failed: {e}")
        return 2
    cks = checks(result)
    print(write_markdown(result, cks, out / "report.md"))
    write_csv(result, out / "samples.csv")
    write_plot(result, out / "soak.png")
    say(f"report: {out / 'report.md'}, {out / 'samples.csv'}, {out / 'soak.png'}")
    return 0 if all(c.ok for c in cks) else 1
