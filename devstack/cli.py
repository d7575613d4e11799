"""``sandman-dev``: the development stack's command line (``python -m devstack``).

- ``sandman-dev up``: the embedded default (simcluster + controller + facade as processes);
- ``sandman-dev demo``: ``up`` plus a short trainer-like demo through the SDK, then stop;
- ``sandman-dev sim``: simcluster alone (``python -m simcluster``; flags pass through).

A command of its own, not subcommands of the trainer's ``sandman``: the SDK's distribution
holds no server and no simulator, so its CLI cannot start them. The controller and the facade
have their own entry points (``sandman-controller``, ``sandman-facade``); the burst benchmark
is ``python -m load.burst``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from .demo import run_demo
from .demo_stack import run_stack_demo
from .stack import StackSettings
from .up import default_workdir, run_up

__all__ = ["main"]


def _stack_flags(p: argparse.ArgumentParser) -> None:
    d = StackSettings(workdir=Path("."))
    p.add_argument("--profile", default=d.profile, help="simcluster profile (default: %(default)s)")
    p.add_argument("--nodes", type=int, help="override the profile's node count")
    p.add_argument("--workdir", type=Path, help="logs, kubeconfigs (default: a new temp dir)")
    p.add_argument("--port", type=int, default=d.facade_port, help="facade port (0: any free port)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="simcluster profile override, e.g. nodes.count=20",
    )  # fmt: skip
    p.add_argument(
        "--manifests", action="store_true",
        help="RBAC on; apply manifests/overlays/simcluster; each component with its own "
        "ServiceAccount's token (docs/operator-guide.md)",
    )  # fmt: skip
    p.add_argument(
        "--preload-image", action="append", default=[], metavar="IMAGE",
        help="an image present on every node from the start (as the node agent would make it)",
    )  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandman-dev", description="Sandman's local development stack."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start simcluster, controller and facade; Ctrl-C stops")
    _stack_flags(up)
    up.add_argument("--status-every", type=float, default=10.0, help="seconds")
    demo = commands.add_parser("demo", help="`up`, a short trainer demo, then stop")
    _stack_flags(demo)
    demo.add_argument(
        "--daemon-only", action="store_true", help="only a local sandbox daemon, no cluster"
    )
    demo.add_argument("--keep-workdir", action="store_true", help="do not delete the workdir")
    commands.add_parser("sim", help="run simcluster (python -m simcluster)", add_help=False)
    return parser


def _settings(args: argparse.Namespace) -> StackSettings:
    return StackSettings(
        workdir=args.workdir or default_workdir(),
        profile=args.profile,
        nodes=args.nodes,
        facade_port=args.port,
        simcluster_overrides=tuple(args.set),
        preloaded_images=tuple(args.preload_image),
        manifests=args.manifests,
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sim"]:  # every flag after it is simcluster's own
        from simcluster.__main__ import main as simcluster_main

        sys.argv = ["sandman-dev sim", *argv[1:]]
        return int(simcluster_main(argv[1:]) or 0)
    args = _parser().parse_args(argv)
    if args.command == "up":
        return asyncio.run(run_up(_settings(args), args.status_every))
    if args.command == "demo":
        if args.daemon_only:
            return asyncio.run(run_demo(keep_workdir=args.keep_workdir))
        settings = _settings(args)
        try:
            return asyncio.run(run_stack_demo(settings))
        finally:
            if args.workdir is None and not args.keep_workdir:
                shutil.rmtree(settings.workdir, ignore_errors=True)
    return 2


if __name__ == "__main__":
    sys.exit(main())
