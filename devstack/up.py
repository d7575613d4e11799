"""``sandman-dev up``: the embedded default — simcluster, controller and facade, one command.

Starts the three as separate processes (devstack/stack.py), prints the facade URL, a tenant
token and the ``export`` lines for the SDK and CLI, then a status line every few seconds
(sandboxes by state, from the facade itself) until Ctrl-C, which stops everything in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

from .stack import Stack, StackError, StackSettings

__all__ = ["run_up", "status_line"]


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


async def status_line(stack: Stack) -> str:
    """Sandboxes of the first tenant by state (first 1,000), and process liveness."""
    headers = {"Authorization": f"Bearer {stack.token}"}
    timeout = aiohttp.ClientTimeout(total=5)
    try:
        async with (
            aiohttp.ClientSession(headers=headers, timeout=timeout) as http,
            http.get(f"{stack.url}/v1/sandboxes", params={"limit": "1000"}) as r,
        ):
            page = await r.json()
    except (aiohttp.ClientError, TimeoutError) as e:
        return f"facade not answering: {e}"
    states = Counter(item["state"] for item in page["items"])
    more = "+" if page.get("continue") else ""
    text = ", ".join(f"{k}={v}" for k, v in sorted(states.items())) or "none"
    down = [n for n, p in stack.processes.items() if p.returncode is not None]
    return f"sandboxes{more}: {text}" + (f" | EXITED: {', '.join(down)}" if down else "")


async def run_up(settings: StackSettings, status_every_s: float = 10.0) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stack = Stack(settings, progress=_say)
    try:
        await stack.start()
    except StackError as e:
        _say(f"failed to start: {e}")
        await stack.stop()
        return 1
    try:
        _say(f"facade:  {stack.url}   (OpenAPI: {stack.url}/openapi.json)")
        _say(f"logs:    {settings.workdir}/{{simcluster,controller,facade}}.log")
        _say(f"kubectl: export KUBECONFIG={stack.kubeconfig}")
        print(f"export SANDMAN_URL={stack.url} SANDMAN_TOKEN={stack.token}", flush=True)
        _say("Ctrl-C stops everything")
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(status_every_s):
                    await stop.wait()
            if not stop.is_set():
                _say(await status_line(stack))
    finally:
        _say("stopping: facade, controller, simcluster (and its sandboxes)")
        await stack.stop()
        _say("stopped")
    return 0


def default_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="sandman-up-"))
