"""Command line of the sandbox daemon: ``sandman-daemon`` / ``python -m daemon.sandbox``.

The token comes from ``SANDMAN_TOKEN`` or a file (``--token-file`` / ``SANDMAN_TOKEN_FILE``,
e.g. a mounted Secret); the daemon refuses to start without one. It prints one line
``sandman-daemon listening on HOST:PORT`` once it accepts connections (``--port 0`` picks a
free port, which is how tests and simcluster's process mode learn it).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from .server import SandboxDaemon
from .settings import DaemonSettings

__all__ = ["main", "parse_settings"]


def _read_token(args: argparse.Namespace) -> str:
    path = args.token_file or os.environ.get("SANDMAN_TOKEN_FILE")
    if path:
        with open(path) as handle:
            return handle.read().strip()
    return os.environ.get("SANDMAN_TOKEN", "").strip()


def parse_settings(argv: Sequence[str] | None = None) -> DaemonSettings:
    parser = argparse.ArgumentParser(prog="sandman-daemon", description=__doc__)
    env = os.environ.get
    defaults = DaemonSettings(token="-")
    parser.add_argument("--host", default=env("SANDMAN_HOST", defaults.host))
    parser.add_argument("--port", type=int, default=int(env("SANDMAN_PORT", defaults.port)))
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


async def _run(settings: DaemonSettings) -> None:
    daemon = SandboxDaemon(settings)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, daemon.stopping.set)
    port = await daemon.start()
    print(f"sandman-daemon listening on {settings.host}:{port}", flush=True)
    await daemon.serve_until_stopped()


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    asyncio.run(_run(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
