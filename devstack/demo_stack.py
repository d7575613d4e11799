"""``sandman-dev demo``: the whole stack, then what a trainer does with it, narrated.

Starts simcluster (``dev``: 3 nodes whose pods really run the daemon as local processes), the
controller and the facade as separate processes, then drives them through the SDK the way
an RL rollout worker would: a batch of sandboxes, tool calls whose state persists between
calls, a streamed command, typed failures, and one release for the whole run — and prints
what happened and how long each step took. Everything is stopped at the end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sandman.sdk import AsyncSandbox, AsyncSandman, SandmanError

from .stack import Stack, StackError, StackSettings

__all__ = ["run_stack_demo"]

IMAGE = "registry.example/tasks/python-repo:1"  # an unmodified task image (simulated pull)
SANDBOXES = 3


def _say(step: str, detail: str) -> None:
    print(f"  {step:<30} {detail}", flush=True)


async def _timed(what: Callable[[], Awaitable[Any]]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = await what()
    return result, (time.perf_counter() - started) * 1000


async def _rollout(index: int, sandbox: AsyncSandbox) -> str:
    """One agent episode: a repo, a persistent shell, a file edit, a test run."""
    shell = await sandbox.session("agent")
    await shell.run(f"mkdir -p /tmp/ep{index}/repo && cd /tmp/ep{index}/repo && export EP={index}")
    await sandbox.files.write(f"/tmp/ep{index}/repo/solve.py", f"print('episode', {index})\n")
    ran = await shell.run("python3 solve.py && echo cwd=$(basename $PWD) EP=$EP")
    return ran.output.replace("\n", " | ").strip(" |")


async def _steps(client: AsyncSandman) -> None:
    sandboxes, ms = await _timed(lambda: client.create_many(SANDBOXES, IMAGE, labels={"demo": "1"}))
    nodes = sorted({s.view.node or "?" for s in sandboxes})
    _say("create_many + wait ready", f"{len(sandboxes)} sandboxes on {nodes} in {ms:.0f} ms")
    first = sandboxes[0]
    result, ms = await _timed(lambda: first.exec("uname -sm; id -un"))
    _say("exec", f"exit {result.exit_code} in {ms:.1f} ms: {result.stdout.strip()!r}")
    outputs = await asyncio.gather(*(_rollout(i, s) for i, s in enumerate(sandboxes)))
    for sandbox, output in zip(sandboxes, outputs, strict=True):
        _say(f"episode in {sandbox.id[:14]}", output)
    chunks = [
        e.text
        async for e in first.exec_stream("for i in 1 2 3; do echo step $i; sleep 0.1; done")
        if e.kind == "stdout"
    ]
    _say("streamed exec", f"{len(chunks)} chunks: {''.join(chunks).split()!r}")
    shell = await first.session("agent")
    hung = await shell.run("sleep 30", timeout_s=1)
    after = await shell.run("echo still in $(basename $PWD)")
    _say("session timeout survives", f"timed_out={hung.timed_out}, then {after.output.strip()!r}")
    try:
        await client.create(IMAGE, sandbox_class="no-such-class")
    except SandmanError as e:
        _say("typed error", f"{type(e).__name__}: {e.reason} (retriable={e.retriable})")
    listed = [s.id async for s in client.list(labels={"demo": "1"})]
    _say("list by label", f"{len(listed)} sandboxes of run {client.owner}")


async def run_stack_demo(settings: StackSettings) -> int:
    print(f"sandman-dev demo: starting the stack in {settings.workdir}", flush=True)
    try:
        async with Stack(settings, progress=lambda m: _say("stack", m)) as stack:
            async with AsyncSandman(stack.url, stack.token) as client:
                await _steps(client)
                _say("release", f"leaving the run releases every sandbox of {client.owner}")
            remaining = await _remaining(stack)
            _say("after release", f"{remaining} sandboxes left")
            _say("stack", "stopping facade, controller, simcluster")
    except StackError as e:
        print(f"sandman-dev demo: the stack did not start: {e}", flush=True)
        return 1
    print("sandman-dev demo: done", flush=True)
    return 0


async def _remaining(stack: Stack, timeout_s: float = 20.0) -> int:
    """Sandboxes still listed for the tenant, once the deletions have gone through."""
    async with AsyncSandman(stack.url, stack.token, lease_s=None) as client:
        deadline = time.monotonic() + timeout_s
        while True:
            left = [s async for s in client.list(all_owners=True)]
            if not left or time.monotonic() > deadline:
                return len(left)
            await asyncio.sleep(0.2)
