"""Command line of the sandbox daemon: ``sandman-daemon`` / ``python -m daemon.sandbox``.

Every flag and environment variable is generated from :class:`DaemonSettings`
(``sandman-daemon --help``, docs/daemon-api.md). The token comes from ``SANDMAN_TOKEN`` or a
file (``--token-file`` / ``SANDMAN_TOKEN_FILE``, e.g. a mounted Secret), or only its
verifier from ``SANDMAN_TOKEN_SHA256`` (how a sandbox pod starts it); the daemon refuses to
start without one. It prints one line ``sandman-daemon listening on HOST:PORT`` once the
server accepts connections (``--port 0`` picks a free port, which is how tests and
simcluster's process mode learn it).

Start-up order, for the readiness probe (``early``): the address is read from the argv and
the socket bound before anything else is imported, and ``EarlyListener`` answers ``/healthz``
while argparse, the settings, asyncio and the server are imported (most of the start-up
time); the server then adopts the listener and any connection that arrived meanwhile. Hence
the imports inside functions here: a module-level import would be paid before the bind, and
hence ``EARLY_NAMES`` spells out the flag and environment names the settings' definition
gives ``host`` and ``port`` (tests/daemon/test_early.py holds them equal): reading them from
the definition would import ``dataclasses`` and ``sandman`` before the bind.
"""

from __future__ import annotations

import os
import sys

from .early import EarlyListener
from .layout import DAEMON_HOST, DAEMON_PORT

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (see the module docstring)
    from collections.abc import Mapping, Sequence

    from .settings import DaemonSettings

__all__ = ["EARLY_NAMES", "main", "parse_settings"]

#: field -> (flag, environment variable), as DaemonSettings' definition names them.
EARLY_NAMES = {"host": ("--host", "SANDMAN_HOST"), "port": ("--port", "SANDMAN_PORT")}


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> DaemonSettings:
    """The settings from the command line and the environment (``os.environ``)."""
    from sandman.base.settings_cli import parse

    from .settings import DaemonSettings

    return parse(DaemonSettings, argv, prog="sandman-daemon", description=__doc__, environ=environ)


def early_address(args: Sequence[str], environ: Mapping[str, str]) -> tuple[str, int] | None:
    """(host, port) as `parse_settings` will read them, from the exact spellings ``--host X``,
    ``--host=X`` (``--port`` alike) and the environment; None where argparse might read the
    argv differently (an abbreviation such as ``--ho``, ``-h``, a port that is not plain
    digits): the server then binds after parsing, as it did before ``early`` existed."""
    (host_flag, host_env), (port_flag, port_env) = EARLY_NAMES["host"], EARLY_NAMES["port"]
    found = {host_flag: environ.get(host_env, DAEMON_HOST)}
    found[port_flag] = environ.get(port_env, str(DAEMON_PORT))
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name in found:
            if not eq:
                if i + 1 == len(args):
                    return None
                i += 1
                value = args[i]
            found[name] = value
        elif name == "-h" or (len(name) > 2 and any(f.startswith(name) for f in found)):
            return None  # help, or an abbreviation argparse may expand to --host/--port
        i += 1
    port = found[port_flag]
    if not (port.isascii() and port.isdecimal()):
        return None
    return found[host_flag], int(port)


def _listen_early(args: Sequence[str]) -> EarlyListener | None:
    address = early_address(args, os.environ)
    if address is None:
        return None
    try:
        return EarlyListener(*address)
    except OSError:
        return None  # e.g. the address is taken: the server's own bind reports it, as before


async def _run(settings: DaemonSettings, early: EarlyListener | None) -> None:
    import asyncio
    import signal

    from .server import SandboxDaemon

    daemon = SandboxDaemon(settings)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, daemon.stopping.set)
    listener, adopted = early.handover() if early is not None else (None, [])
    port = await daemon.start(listener, adopted)
    print(f"sandman-daemon listening on {settings.host}:{port}", flush=True)
    await daemon.serve_until_stopped()


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    early = _listen_early(args)
    settings = parse_settings(args)
    import logging

    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(message)s")
    if early is not None and early.address != (settings.host, settings.port):
        early.close()  # the argv meant another address after all: bind it the usual way
        early = None
    import asyncio

    asyncio.run(_run(settings, early))
    return 0


if __name__ == "__main__":
    sys.exit(main())
