"""What an integration adds per tool call over the bare SDK, on one sandbox each: the median of
N calls of ``echo x`` through mini-swe-agent's ``execute`` against ``Sandbox.exec``, and
through SWE-ReX's ``execute``/``run_in_session`` against ``AsyncSandbox.exec``/``session.run``.
Run with the harness venv's Python against a facade (``SANDMAN_URL``/``SANDMAN_TOKEN``):
argv is the image and N. Prints JSON, milliseconds. docs/integrations.md records a run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from swerex.runtime.abstract import BashAction, Command, CreateBashSessionRequest

from sandman.integrations.mini_swe_agent import SandmanEnvironment
from sandman.integrations.swerex import SandmanDeployment


def _paired_ms(calls: dict[str, Callable[[], object]], n: int) -> dict[str, float]:
    """Medians of the calls taken in turn (A, B, A, B...), so drift on a shared machine
    weighs on each alike."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(n):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - start)
    return {name: round(statistics.median(s) * 1000, 2) for name, s in samples.items()}


async def _apaired_ms(
    calls: dict[str, Callable[[], Awaitable[object]]], n: int
) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(n):
        for name, call in calls.items():
            start = time.perf_counter()
            await call()
            samples[name].append(time.perf_counter() - start)
    return {name: round(statistics.median(s) * 1000, 2) for name, s in samples.items()}


#: What mini-swe-agent's environment runs for ``echo x`` (its default ``bash -lc``).
_MINI_ARGV = ["/bin/sh", "-c", 'exec "$@" 2>&1', "sh", "bash", "-lc", "echo x"]


def _mini(image: str, n: int) -> dict[str, float]:
    with SandmanEnvironment(image=image) as env:
        assert env.sandbox is not None
        sandbox = env.sandbox
        calls = {
            "sdk_exec_echo_ms": lambda: sandbox.exec(["echo", "x"]),
            "sdk_exec_same_argv_ms": lambda: sandbox.exec(_MINI_ARGV),
            "mini_swe_agent_execute_ms": lambda: env.execute({"command": "echo x"}),
        }
        return _paired_ms(calls, n)


async def _swerex(image: str, n: int) -> dict[str, float]:
    deployment = SandmanDeployment(image=image)
    await deployment.start()
    try:
        runtime, sandbox = deployment.runtime, deployment.sandbox
        await runtime.create_session(CreateBashSessionRequest())
        session = await sandbox.session("bare")
        action = BashAction(command="echo x")
        command = Command(command=["echo", "x"])
        calls = {
            "sdk_exec_ms": lambda: sandbox.exec(["echo", "x"]),
            "swerex_execute_ms": lambda: runtime.execute(command),
            "sdk_session_run_ms": lambda: session.run("echo x"),
            "swerex_run_in_session_ms": lambda: runtime.run_in_session(action),
        }
        return await _apaired_ms(calls, n)
    finally:
        await deployment.stop()


def main(image: str, n: str) -> dict[str, Any]:
    return {"mini_swe_agent": _mini(image, int(n)), "swe_rex": asyncio.run(_swerex(image, int(n)))}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
