"""``python -m daemon.node`` (``sandman-node-agent``): run the node agent (docs/node-agent.md).

Every field of :class:`~daemon.node.settings.AgentSettings` is a flag (``--pull-parallelism``,
``--cri-socket``...) defaulting to the dataclass's value; ``--node-name`` and
``--namespace`` default to ``$NODE_NAME`` and ``$POD_NAMESPACE`` (the DaemonSet sets both
from the downward API). SIGTERM/SIGINT stop it; pulls under way are abandoned (the runtime
finishes or drops them; the next agent finds the result with ListImages).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from dataclasses import MISSING, fields

from daemon.node.app import AgentProcess, run_until_signalled
from daemon.node.settings import AgentSettings

__all__ = ["main", "parse_settings"]

_ENV = {"node_name": "NODE_NAME", "namespace": "POD_NAMESPACE"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m daemon.node", description=__doc__)
    for f in fields(AgentSettings):
        default = f.default if f.default is not MISSING else None
        if f.name in _ENV:
            default = os.environ.get(_ENV[f.name], default)
        kind = type(f.default) if f.default not in (None, MISSING) else str
        p.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=default)
    p.add_argument("--log-level", default="INFO")
    return p


def parse_settings(argv: list[str] | None = None) -> tuple[AgentSettings, str]:
    a = vars(_parser().parse_args(argv))
    level = a.pop("log_level")
    return AgentSettings(**a), level


def main(argv: list[str] | None = None) -> int:
    try:
        settings, level = parse_settings(argv)
    except ValueError as e:
        print(f"sandman-node-agent: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not settings.node_name:
        print("sandman-node-agent: --node-name (or $NODE_NAME) is required", file=sys.stderr)
        return 2
    return asyncio.run(run_until_signalled(AgentProcess(settings).run()))


if __name__ == "__main__":
    sys.exit(main())
