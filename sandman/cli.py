"""The ``sandman`` command line.

``sandman demo`` starts a real sandbox daemon as a local process and drives a short agent-like
sequence of tool calls against it over HTTP. The trainer conveniences (``create``, ``exec``,
``ls``, ``rm``) live in :mod:`sandman.cli_trainer`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from .cli_trainer import TRAINER_COMMANDS, add_trainer_parsers, run_trainer_command
from .demo import run_demo

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandman", description="Sandboxes for agentic RL.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="start a local sandbox daemon and run tool calls")
    demo.add_argument("--keep-workdir", action="store_true", help="do not delete the workdir")
    add_trainer_parsers(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return asyncio.run(run_demo(keep_workdir=args.keep_workdir))
    if args.command in TRAINER_COMMANDS:
        return run_trainer_command(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
