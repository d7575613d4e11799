"""``python -m controller``: run the Sandman controller (see docs/controller.md).

Every flag is generated from :class:`~controller.app.ControllerSettings` and its parts
(:mod:`sandman.base.settings`): a part's flags carry its name (``--gc-terminal-retention-s``
is ``gc.terminal_retention_s``), ``--help`` lists them by part, and docs/controller.md's table
is generated from the same definition. Logs progress every ``--progress-interval-s``;
SIGTERM/SIGINT release the leader lease and exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Mapping, Sequence

from controller.app import Controller, ControllerSettings
from sandman.base.settings_cli import parse

__all__ = ["PROG", "main", "parse_settings"]

PROG = "python -m controller"


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> ControllerSettings:
    """The settings from the command line; an empty one gives ``ControllerSettings()``."""
    return parse(ControllerSettings, argv, prog=PROG, description=__doc__, environ=environ)


async def _run(settings: ControllerSettings) -> None:
    controller = Controller(settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, controller.stop)
    await controller.run()


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(argv)
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(_run(settings))
    logging.getLogger("controller").info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
