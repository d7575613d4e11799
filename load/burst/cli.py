"""Command line of the burst benchmark: ``python -m load.burst`` (``make bench-burst``).

Exit code: 0 when every check of the report passed, 1 when one failed, 2 on a run that
could not complete (the stack did not start, the requests could not be sent).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path

from load.burst.classes import BurstClass
from load.burst.settings import BurstSettings, Thresholds
from scheduler import SchedulerSettings

__all__ = ["add_arguments", "main", "run_from_args"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every default comes from ``BurstSettings``/``Thresholds``, the controller's cap from
    ``SchedulerSettings``: the help cannot say something the run does not do."""
    d, th = BurstSettings(out=Path(".")), Thresholds()
    cap = SchedulerSettings().max_starting_per_node
    p.add_argument("--sandboxes", type=int, default=d.sandboxes, help="requests in the burst")
    p.add_argument("--window", type=float, default=d.window_s, help="seconds to send them in")
    p.add_argument("--profile", default=d.profile, help="simcluster profile")
    p.add_argument("--nodes", type=int, help="override the profile's node count")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile value (simcluster --set)")  # fmt: skip
    p.add_argument(
        "--direct",
        action="store_true",
        help="create sandbox pods through the Kubernetes API instead of the facade "
        "(measures controller + cluster without the facade)",
    )
    p.add_argument("--classes", type=Path, metavar="FILE",
                   help="sandbox classes and their shares of the requests (YAML list, "
                   "load/burst/classes.py), e.g. load/burst/mixed-classes.yaml")  # fmt: skip
    p.add_argument("--creation", choices=("pre-placed", "binder"), default=d.creation,
                   help="the facade's creation mode (pre-placed: 1 write)")  # fmt: skip
    p.add_argument("--apf", choices=("shared", "manifests"), default=d.apf,
                   help="manifests: apply manifests/access/flowcontrol.yaml (binds in their "
                   "own level); needs --profile paper-burst-apf")  # fmt: skip
    p.add_argument("--kill-leader-at", type=float, metavar="FRACTION",
                   help="two controllers; SIGKILL the leader at this fraction bound (with "
                   "--announce: of the sandboxes answered)")  # fmt: skip
    p.add_argument("--kill-facade-at", type=float, metavar="FRACTION",
                   help="two facade replicas; SIGKILL one at this fraction of the requests "
                   "answered (requests spread over both, moved on a lost connection)")  # fmt: skip
    p.add_argument("--no-pacer", action="store_true",
                   help="facade, controller at fixed --client-qps (no pacing)")  # fmt: skip
    p.add_argument("--batch", type=int, default=d.batch, help="sandboxes per facade request")
    p.add_argument("--baseline-sample", type=int, default=d.baseline_sample,
                   help="pods bound by the QPS-50 baseline binder (0: skip)")  # fmt: skip
    p.add_argument("--controller-qps", type=float, default=d.controller_qps)
    p.add_argument("--controller-burst", type=int, default=d.controller_burst)
    p.add_argument("--max-starting-per-node", type=int,
                   help=f"the controller's start-queue cap (its default: {cap})")  # fmt: skip
    p.add_argument("--ready-timeout", type=float, default=d.ready_timeout_s, help="seconds")
    p.add_argument("--min-efficiency", type=float, default=th.min_efficiency)
    p.add_argument("--max-writes", type=float, default=th.max_writes_per_sandbox,
                   help="API writes per sandbox")  # fmt: skip
    p.add_argument("--announce", action="store_true",
                   help="announce the burst's sandboxes ahead through the SDK (prepare, "
                   "sandboxes=True), wait until the pool is filled, then burst")  # fmt: skip
    p.add_argument("--announce-fraction", type=float, default=d.announce_fraction,
                   metavar="F", help="the share announced (the rest is cold)")  # fmt: skip
    p.add_argument("--pool-qps", type=float, metavar="PER_S",
                   help="the pool filler's writes/s (default: the rate of the priority "
                   "level the pool account lands in, else --controller-qps)")  # fmt: skip
    p.add_argument("--fill-timeout", type=float, default=d.fill_timeout_s, help="seconds")
    p.add_argument("--min-fill-budget-used", type=float, default=th.min_fill_budget_used,
                   help="the fill's share of the pool level's budget (check)")  # fmt: skip
    p.add_argument("--series", type=int, default=0, metavar="N",
                   help="N rounds of a cold and an --announce run interleaved (and a cold "
                   "burst of the remainder's size when --announce-fraction < 1); medians "
                   "and ratios in <out>/series.md (load/burst/series.py)")  # fmt: skip
    p.add_argument("--out", help="report directory (default build/bench-burst/<time>)")


def run_from_args(a: argparse.Namespace, command: str) -> int:
    from devstack.stack import StackError
    from load.burst.classes import ClassesError, load_classes
    from load.burst.progress import say
    from load.burst.report import write_csv, write_markdown, write_plot
    from load.burst.run import run_burst

    out = Path(a.out or f"build/bench-burst/{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    try:
        classes = load_classes(a.classes) if a.classes else ()
    except ClassesError as e:
        say(f"burst benchmark failed: {e}")
        return 2
    try:
        settings = _settings(a, out, classes, command)
    except ValueError as e:
        say(f"burst benchmark failed: {e}")
        return 2
    if a.series:
        from load.burst.series import run_series_from

        return run_series_from(settings, a.series)
    try:
        result = asyncio.run(run_burst(settings, say))
    except (StackError, RuntimeError) as e:
        say(f"burst benchmark failed: {e}")
        return 2
    print(write_markdown(result, out / "report.md"))
    write_csv(result.sandboxes, out / "sandboxes.csv")
    write_plot(result, out / "timeline.png")
    say(f"report: {out / 'report.md'}, {out / 'sandboxes.csv'}, {out / 'timeline.png'}")
    return 0 if result.ok else 1


def _settings(
    a: argparse.Namespace, out: Path, classes: tuple[BurstClass, ...], command: str
) -> BurstSettings:
    return BurstSettings(
        out=out,
        classes=classes,
        sandboxes=a.sandboxes,
        window_s=a.window,
        profile=a.profile,
        nodes=a.nodes,
        overrides=tuple(a.set),
        direct=a.direct,
        creation=a.creation,
        apf=a.apf,
        kill_leader_at=a.kill_leader_at,
        kill_facade_at=a.kill_facade_at,
        batch=a.batch,
        pacer=not a.no_pacer,
        baseline_sample=a.baseline_sample,
        ready_timeout_s=a.ready_timeout,
        controller_qps=a.controller_qps,
        controller_burst=a.controller_burst,
        controller_args=(
            ("--scheduler-max-starting-per-node", str(a.max_starting_per_node))
            if a.max_starting_per_node
            else ()
        ),
        thresholds=Thresholds(
            min_efficiency=a.min_efficiency,
            max_writes_per_sandbox=a.max_writes,
            min_fill_budget_used=a.min_fill_budget_used,
        ),
        command=command,
        announce=a.announce,
        announce_fraction=a.announce_fraction,
        pool_qps=a.pool_qps,
        fill_timeout_s=a.fill_timeout,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.burst", description=__doc__)
    add_arguments(p)
    args = sys.argv[1:] if argv is None else argv
    return run_from_args(p.parse_args(args), "python -m load.burst " + shlex.join(args))
