"""The ``sandman`` command line.

For now it has the embedded demo (``sandman demo``): start a real sandbox daemon as a local
process and drive a short agent-like sequence of tool calls against it over HTTP. Later issues
add ``sandman up`` (simcluster + controller + facade), the deployment entry points and the
trainer conveniences.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from load.burst.cli import add_bench_parser, run_bench

from .demo import run_demo

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandman", description="Sandboxes for agentic RL.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="start a local sandbox daemon and run tool calls")
    demo.add_argument("--keep-workdir", action="store_true", help="do not delete the workdir")
    add_bench_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return asyncio.run(run_demo(keep_workdir=args.keep_workdir))
    if args.command == "bench":
        return run_bench(args, argv)
    return 2


if __name__ == "__main__":
    sys.exit(main())
