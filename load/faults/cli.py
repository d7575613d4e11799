"""Command line of the fault benchmark: ``python -m load.faults`` (``make bench-faults``).

Exit code: 0 when every check passed (nothing lost, duplicated or leaked, every failure
typed, every fault detected in time), 1 when one failed, 2 when a run could not complete.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path

from load.faults.settings import FaultSettings, Thresholds

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    from load.faults.faults import FAULTS

    d, t = FaultSettings(out=Path(".")), Thresholds()
    p = argparse.ArgumentParser(prog="python -m load.faults", description=__doc__)
    p.add_argument("faults", nargs="*", metavar="FAULT",
                   help=f"faults to run (default: all): {', '.join(FAULTS)}")  # fmt: skip
    p.add_argument("--sandboxes", type=int, default=d.sandboxes, help="burst size per fault")
    p.add_argument("--window", type=float, default=d.window_s, help="seconds to request it in")
    p.add_argument("--profile", default=d.profile)
    p.add_argument("--nodes", type=int, help="override the profile's node count")
    p.add_argument("--workers", type=int, default=d.workers, help="SDK clients")
    p.add_argument("--daemon-sandboxes", type=int, default=d.daemon_sandboxes,
                   help="the daemon fault's burst (real daemons, process runtime)")  # fmt: skip
    p.add_argument("--daemons-killed", type=int, default=d.daemons_killed)
    p.add_argument("--dying-trainer-sandboxes", type=int, default=d.dying_trainer_sandboxes)
    p.add_argument("--ready-timeout", type=float, default=d.ready_timeout_s)
    p.add_argument("--max-detect", type=float, default=t.max_detect_s, help="seconds")
    p.add_argument("--out", help="report directory (default build/bench-faults/<time>)")
    return p


def main(argv: list[str] | None = None) -> int:
    from devstack.stack import StackError
    from load.burst.progress import say
    from load.faults.report import checks, write_csv, write_markdown, write_plot
    from load.faults.run import run_series

    args = sys.argv[1:] if argv is None else argv
    p = _parser()
    a = p.parse_args(args)
    from load.faults.faults import FAULTS

    unknown = [f for f in a.faults if f not in FAULTS]
    if unknown:
        p.error(f"unknown fault {', '.join(unknown)}; known: {', '.join(FAULTS)}")
    out = Path(a.out or f"build/bench-faults/{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    s = FaultSettings(
        out=out,
        faults=tuple(a.faults),
        sandboxes=a.sandboxes,
        window_s=a.window,
        profile=a.profile,
        nodes=a.nodes,
        workers=a.workers,
        daemon_sandboxes=a.daemon_sandboxes,
        daemons_killed=a.daemons_killed,
        dying_trainer_sandboxes=a.dying_trainer_sandboxes,
        ready_timeout_s=a.ready_timeout,
        thresholds=Thresholds(max_detect_s=a.max_detect),
        command="python -m load.faults " + shlex.join(args),
    )
    try:
        results = asyncio.run(run_series(s, say))
    except (StackError, RuntimeError) as e:
        say(f"fault benchmark failed: {e}")
        return 2
    cks = checks(results, s.thresholds)
    print(write_markdown(results, cks, s.command, out / "report.md"))
    write_csv(results, out / "sandboxes.csv")
    write_plot(results, out / "faults.png")
    say(f"report: {out / 'report.md'}, {out / 'sandboxes.csv'}, {out / 'faults.png'}")
    if any(r.error for r in results):
        return 2
    return 0 if all(c.ok for c in cks) else 1
