"""``python -m facade``: run the trainer-facing HTTP facade (docs/facade.md).

Every flag but ``--config`` (the file of tenants, classes and the token secret) is
generated from :class:`~facade.app.FacadeSettings` and its parts (:mod:`sandman.base.settings`:
``--placement-leader-wait-s`` is ``placement.leader_wait_s``); docs/facade.md's table is
generated from the same definition. Prints ``facade listening on <url>`` once it serves;
``/readyz`` turns 200 when its watch caches have synced. SIGTERM/SIGINT stop it cleanly
(in-flight requests are cut: trainers retry, every operation is safe to repeat).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Mapping, Sequence

from sandman.base.settings_cli import from_args, parser

from .app import Facade, FacadeSettings
from .config import ConfigError, load_config

__all__ = ["PROG", "main", "parse_settings"]

PROG = "python -m facade"


async def _run(settings: FacadeSettings, config_path: str) -> int:
    try:
        config = load_config(config_path)
    except ConfigError as e:
        print(f"facade: {e}", file=sys.stderr)
        return 2
    facade = Facade(settings, config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await facade.start()
        print(f"facade listening on {facade.url}", flush=True)
        await stop.wait()
    finally:
        await facade.stop()
    return 0


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[FacadeSettings, str]:
    """(settings, config path) from the command line; with ``--config`` alone the settings
    are ``FacadeSettings()``."""
    p = parser(
        FacadeSettings, prog=PROG, description=__doc__, usage="%(prog)s --config FILE [options]"
    )
    p.add_argument(
        "--config", required=True, help="facade YAML (secret, delivery, classes, tenants)"
    )
    args = p.parse_args(argv)
    return from_args(FacadeSettings, args, p, environ), args.config


def main(argv: list[str] | None = None) -> int:
    settings, config = parse_settings(argv)
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(_run(settings, config))


if __name__ == "__main__":
    sys.exit(main())
