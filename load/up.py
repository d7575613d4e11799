"""``python -m load.up``: the stack the load tests run against, until Ctrl-C.

simcluster, the controller and the facade as separate processes (load/burst/stack.py, the
burst benchmark's launcher), one tenant with limits that never bind, and a fresh bearer
token printed for locust (``SANDMAN_TOKEN``). Use ``--profile dev`` (pods are real local
processes running the sandbox daemon, so tool calls work) or ``--profile paper-burst``
(virtual pods: create/Ready/release only, run locust with ``--tool-calls 0``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import signal
import sys
import tempfile
from pathlib import Path

from load.burst.progress import say
from load.burst.stack import Stack, StackSettings

__all__ = ["main"]


async def _up(a: argparse.Namespace) -> int:
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="sandman-load-"))
    workdir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    settings = StackSettings(
        workdir=workdir,
        profile=a.profile,
        nodes=a.nodes,
        overrides=tuple(a.set),
        token=token,
        preload_image=a.image,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Stack(settings, say) as stack:
        say(f"facade: {stack.facade_url}   (logs in {workdir})")
        print(f"export SANDMAN_TOKEN={token}", flush=True)
        print(
            f"locust -f load/locustfile.py --host {stack.facade_url} --image {a.image}",
            flush=True,
        )
        with contextlib.suppress(asyncio.CancelledError):
            await stop.wait()
        say("stopping")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.up", description=__doc__)
    p.add_argument("--profile", default="dev")
    p.add_argument("--nodes", type=int)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--image", default="registry.bench/task:1", help="preloaded on every node")
    p.add_argument("--workdir")
    return asyncio.run(_up(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
