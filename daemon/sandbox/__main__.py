"""Command line of the sandbox daemon: ``sandman-daemon`` / ``python -m daemon.sandbox``.

The token comes from ``SANDMAN_TOKEN`` or a file (``--token-file`` / ``SANDMAN_TOKEN_FILE``,
e.g. a mounted Secret); the daemon refuses to start without one. It prints one line
``sandman-daemon listening on HOST:PORT`` once the server accepts connections (``--port 0``
picks a free port, which is how tests and simcluster's process mode learn it).

Start-up order, for the readiness probe (``early``): the address is read from the argv and
the socket bound before anything else is imported, and ``EarlyListener`` answers ``/healthz``
while argparse, the settings, asyncio and the server are imported (most of the start-up
time); the server then adopts the listener and any connection that arrived meanwhile. Hence
the imports inside functions here: a module-level import would be paid before the bind.
"""

from __future__ import annotations

import os
import sys

from .early import EarlyListener
from .layout import DAEMON_HOST, DAEMON_PORT

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (see the module docstring)
    import argparse
    from collections.abc import Mapping, Sequence

    from .settings import DaemonSettings

__all__ = ["main", "parse_settings"]

HOST_ENV = "SANDMAN_HOST"
PORT_ENV = "SANDMAN_PORT"


def _read_token(args: argparse.Namespace) -> str:
    path = args.token_file or os.environ.get("SANDMAN_TOKEN_FILE")
    if path:
        with open(path) as handle:
            return handle.read().strip()
    return os.environ.get("SANDMAN_TOKEN", "").strip()


def parse_settings(argv: Sequence[str] | None = None) -> DaemonSettings:
    import argparse
    import logging

    from .settings import DaemonSettings

    parser = argparse.ArgumentParser(prog="sandman-daemon", description=__doc__)
    env = os.environ.get
    defaults = DaemonSettings(token="-")
    parser.add_argument("--host", default=env(HOST_ENV, defaults.host))
    parser.add_argument("--port", type=int, default=int(env(PORT_ENV, defaults.port)))
    parser.add_argument("--token-file", default=None)
    parser.add_argument("--workdir", default=env("SANDMAN_WORKDIR"))
    parser.add_argument("--run-dir", default=env("SANDMAN_RUN_DIR"))
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=float(env("SANDMAN_IDLE_TIMEOUT", "0")) or None,
        help="exit cleanly after this many seconds without an API call (0: never)",
    )
    parser.add_argument("--max-concurrent-execs", type=int, default=defaults.max_concurrent_execs)
    parser.add_argument("--max-json-body-bytes", type=int, default=defaults.max_json_body_bytes)
    parser.add_argument("--max-upload-bytes", type=int, default=defaults.max_upload_bytes)
    parser.add_argument("--max-extract-bytes", type=int, default=defaults.max_extract_bytes)
    parser.add_argument("--max-archive-members", type=int, default=defaults.max_archive_members)
    parser.add_argument("--max-processes", type=int, default=defaults.max_processes)
    parser.add_argument("--max-sessions", type=int, default=defaults.max_sessions)
    parser.add_argument("--max-connections", type=int, default=defaults.max_connections)
    parser.add_argument("--keepalive-timeout", type=float, default=defaults.keepalive_timeout_s)
    parser.add_argument("--header-timeout", type=float, default=defaults.header_timeout_s)
    parser.add_argument("--body-timeout", type=float, default=defaults.body_timeout_s)
    parser.add_argument("--send-timeout", type=float, default=defaults.send_timeout_s)
    parser.add_argument("--exec-retention", type=float, default=defaults.exec_retention_s)
    parser.add_argument("--max-retained-execs", type=int, default=defaults.max_retained_execs)
    parser.add_argument(
        "--max-retained-exec-bytes", type=int, default=defaults.max_retained_exec_bytes
    )
    parser.add_argument("--exec-detach-grace", type=float, default=defaults.exec_detach_grace_s)
    parser.add_argument("--log-level", default=env("SANDMAN_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    token = _read_token(args)
    if not token:
        parser.error("no token: set SANDMAN_TOKEN or SANDMAN_TOKEN_FILE (or --token-file)")
    return DaemonSettings(
        token=token,
        host=args.host,
        port=args.port,
        workdir=args.workdir,
        run_dir=args.run_dir,
        idle_timeout_s=args.idle_timeout,
        max_concurrent_execs=args.max_concurrent_execs,
        max_json_body_bytes=args.max_json_body_bytes,
        max_upload_bytes=args.max_upload_bytes,
        max_extract_bytes=args.max_extract_bytes,
        max_archive_members=args.max_archive_members,
        max_processes=args.max_processes,
        max_sessions=args.max_sessions,
        max_connections=args.max_connections,
        keepalive_timeout_s=args.keepalive_timeout,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        send_timeout_s=args.send_timeout,
        exec_retention_s=args.exec_retention,
        max_retained_execs=args.max_retained_execs,
        max_retained_exec_bytes=args.max_retained_exec_bytes,
        exec_detach_grace_s=args.exec_detach_grace,
    )


def early_address(args: Sequence[str], environ: Mapping[str, str]) -> tuple[str, int] | None:
    """(host, port) as `parse_settings` will read them, from the exact spellings ``--host X``,
    ``--host=X`` (``--port`` alike) and the environment; None where argparse might read the
    argv differently (an abbreviation such as ``--ho``, ``-h``, a port that is not plain
    digits): the server then binds after parsing, as it did before ``early`` existed."""
    found = {"--host": environ.get(HOST_ENV, DAEMON_HOST)}
    found["--port"] = environ.get(PORT_ENV, str(DAEMON_PORT))
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
        elif name.startswith(("--h", "--p", "-h")):
            return None
        i += 1
    port = found["--port"]
    if not (port.isascii() and port.isdecimal()):
        return None
    return found["--host"], int(port)


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
    if early is not None and early.address != (settings.host, settings.port):
        early.close()  # the argv meant another address after all: bind it the usual way
        early = None
    import asyncio

    asyncio.run(_run(settings, early))
    return 0


if __name__ == "__main__":
    sys.exit(main())
