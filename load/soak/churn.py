"""The soak's trainers: steady churn through the SDK, and a few trainers making tool calls.

Why batches per second: a trainer step asks for its rollouts' sandboxes at once; one
``create_many`` per second of the plan, each member waited for, held ``hold_s`` after Ready
and released on its own (a ``DELETE`` per sandbox, as rollouts finish at different times).
Outcomes use the fault benchmark's definitions (``load.faults.outcomes``).

The tool trainers use the ``proc`` sandbox class, which lands on simcluster's process nodes
(real daemons under bubblewrap): a session command, a file write and read, an exec, then
release — the facade's proxy path under churn, not only its control plane.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from load.faults.outcomes import TrainerOutcome, is_typed, record_failure
from load.faults.trainer import Clients, create_batch
from sandman import AsyncSandman
from sandman.sdk.errors import SandboxTimeout, SandmanError
from sandman.sdk.sandbox import AsyncSandbox

__all__ = ["PROC_CLASS", "Churn", "ToolStats"]

PROC_CLASS = "proc"
Clock = Callable[[], float]


@dataclass(slots=True)
class ToolStats:
    calls: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # reason -> calls
    untyped: int = 0


class Churn(Clients):
    def __init__(
        self,
        urls: Sequence[str],
        token: str,
        run: str,
        image: str,
        clock: Clock,
        *,
        workers: int,
        hold_s: float,
        ready_timeout_s: float,
    ) -> None:
        self.run, self.image, self.now = run, image, clock
        self.hold_s, self.ready_timeout_s = hold_s, ready_timeout_s
        self.clients = [
            AsyncSandman(urls[i % len(urls)], token, owner=f"{run}-w{i}", release_on_exit=False)
            for i in range(workers)
        ]
        self.outcomes: list[TrainerOutcome] = []
        self.tools = ToolStats()
        self.stopping = asyncio.Event()

    @property
    def ready(self) -> int:
        return sum(1 for o in self.outcomes if o.ready is not None)

    async def run_plan(self, plan: Sequence[int], start: float) -> None:
        """One batch create per second of ``plan`` (``plan[i]`` sandboxes at ``start + i``)."""
        tasks: set[asyncio.Task[None]] = set()
        for i, k in enumerate(plan):
            delay = start + i - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            if k > 0:
                task = asyncio.create_task(self._batch(i, k))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)

    async def _batch(self, i: int, k: int) -> None:
        client = self.clients[i % len(self.clients)]
        created = await create_batch(
            client, f"{self.run}-{i}", k, self.image, self.now, self.outcomes
        )
        await asyncio.gather(*(self._life(m, sb) for m, sb in created))

    async def _life(self, m: TrainerOutcome, sb: AsyncSandbox) -> None:
        try:
            await sb.wait_ready(timeout_s=self.ready_timeout_s)
        except SandboxTimeout:
            m.outcome, m.reason = "lost", "no answer by the deadline"
            await sb.release_quietly()
            return
        except Exception as e:
            self._failed(m, e)
            await sb.release_quietly()
            return
        m.ready, m.outcome = self.now(), "ready"
        await asyncio.sleep(self.hold_s)
        try:
            await sb.release()
        except SandmanError as e:
            m.reason = f"release: {e.reason}"
            return
        m.released = True

    def _failed(self, m: TrainerOutcome, e: BaseException) -> None:
        record_failure(m, e, self.now())

    # --- tool calls -----------------------------------------------------------------------
    async def tool_loop(self, k: int) -> None:
        """Until ``stopping``: a ``proc`` sandbox, four tool calls, release; again."""
        client = self.clients[k % len(self.clients)]
        n = 0
        while not self.stopping.is_set():
            n += 1
            m = TrainerOutcome(f"{self.run}-tools{k}/{n}", requested=self.now())
            self.outcomes.append(m)
            try:
                sb = await client.create(
                    self.image, sandbox_class=PROC_CLASS, timeout_s=self.ready_timeout_s
                )
            except Exception as e:
                self._failed(m, e)
                await asyncio.sleep(1.0)
                continue
            m.sandbox_id, m.ready, m.outcome = sb.id, self.now(), "ready"
            try:
                await self._tool_calls(sb, n)
            finally:
                with contextlib.suppress(SandmanError):
                    await sb.release()
                    m.released = True

    async def _tool_calls(self, sb: AsyncSandbox, n: int) -> None:
        steps = (
            lambda: _session_echo(sb, n),
            lambda: sb.files.write("/tmp/soak.txt", f"soak {n}\n"),
            lambda: _read_back(sb, n),
            lambda: sb.exec("cat /tmp/soak.txt"),
        )
        for step in steps:
            self.tools.calls += 1
            try:
                await step()
            except SandmanError as e:
                key = e.reason if is_typed(e.reason) else "untyped"
                self.tools.failed[key] = self.tools.failed.get(key, 0) + 1
                self.tools.untyped += 0 if is_typed(e.reason) else 1
            except Exception as e:
                self.tools.failed[type(e).__name__] = self.tools.failed.get(type(e).__name__, 0) + 1
                self.tools.untyped += 1


async def _session_echo(sb: AsyncSandbox, n: int) -> None:
    async with await sb.session() as shell:
        result = await shell.run(f"echo soak-{n}")
    if f"soak-{n}" not in result.output:
        raise RuntimeError(f"session answered {result.output!r}")


async def _read_back(sb: AsyncSandbox, n: int) -> None:
    text = await sb.files.read_text("/tmp/soak.txt")
    if text != f"soak {n}\n":
        raise RuntimeError(f"file read back {text!r}")
