"""``python -m daemon.node`` (``sandman-node-agent``): run the node agent (docs/node-agent.md).

Every flag is generated from :class:`~daemon.node.settings.AgentSettings`
(:mod:`sandman.base.settings`: ``--pull-parallelism``, ``--cri-socket``...), as is
docs/node-agent.md's table; ``--node-name`` is also read from ``$NODE_NAME`` (the DaemonSet
sets it from the downward API).
SIGTERM/SIGINT stop it; pulls under way are abandoned (the runtime finishes or drops them;
the next agent finds the result with ListImages).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Mapping, Sequence

from daemon.node.app import AgentProcess, run_until_signalled
from daemon.node.settings import AgentSettings
from sandman.base.settings_cli import parse

__all__ = ["PROG", "main", "parse_settings"]

PROG = "python -m daemon.node"


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> AgentSettings:
    """The settings from the command line and the environment (``os.environ``)."""
    return parse(AgentSettings, argv, prog=PROG, description=__doc__, environ=environ)


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(argv)
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not settings.node_name:
        print("sandman-node-agent: --node-name (or $NODE_NAME) is required", file=sys.stderr)
        return 2
    return asyncio.run(run_until_signalled(AgentProcess(settings).run()))


if __name__ == "__main__":
    sys.exit(main())
