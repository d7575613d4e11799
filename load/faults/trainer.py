"""The trainer's side of a fault run: real SDK clients creating a burst and waiting on it.

Why the SDK and not raw HTTP: what the issue asks is what a *trainer* sees under each fault
— the SDK's retries with the same Idempotency-Key, its typed errors, its owner lease — so the
measurement goes through the code trainers run. ``workers`` clients (one owner each) share
the burst's batch creates round-robin and are spread over the facade replicas the way
trainers behind a DNS round-robin would be; each member's fate is a
:class:`~load.faults.outcomes.TrainerOutcome`.

``python -m load.faults.trainer`` is the trainer that dies: a separate process that creates
its sandboxes under its own owner lease, writes their ids to a file, says ``ready`` and waits
to be SIGKILLed (no release, no lease renewal after that).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

from load.burst.driver import schedule
from load.faults.outcomes import TrainerOutcome, is_typed, record_failure
from sandman import AsyncSandman
from sandman.sdk.errors import RetriableError, SandboxNotFound, SandboxTimeout, SandmanError
from sandman.sdk.sandbox import AsyncSandbox

__all__ = ["Clients", "Trainers", "create_batch", "main"]

Clock = Callable[[], float]
#: Sandbox waits (long polls) one client holds at once: its connection pool's size.
WAITS_PER_CLIENT = 240


async def create_batch(
    client: AsyncSandman,
    key: str,
    size: int,
    image: str,
    now: Clock,
    outcomes: list[TrainerOutcome],
    retries: int = 2,
) -> list[tuple[TrainerOutcome, AsyncSandbox]]:
    """One batch create of ``size`` under the Idempotency-Key ``key``; its members are added
    to ``outcomes``. Returns each member with its sandbox, or nothing when the create failed
    (every member then failed with its error).

    A retriable failure once the SDK's own retries ran out (``connection_failed`` while a
    killed facade replica restarts) is repeated ``retries`` times with the same key, as a
    trainer would: the facade answers with the sandboxes it already created under it, so
    they are neither orphaned nor created twice."""
    members = [TrainerOutcome(f"{key}/{i}", requested=now()) for i in range(size)]
    outcomes += members
    for attempt in range(retries + 1):
        try:
            sandboxes = await client.create_many(size, image, wait=False, idempotency_key=key)
            break
        except RetriableError as e:
            if attempt < retries:
                continue
            error: BaseException = e
        except Exception as e:
            error = e
        for m in members:
            record_failure(m, error, now())
        return []
    for m, sb in zip(members, sandboxes, strict=True):
        m.sandbox_id = sb.id
    return list(zip(members, sandboxes, strict=True))


class Clients:
    """SDK clients opened and closed together (their owner leases renewed while open)."""

    clients: list[AsyncSandman]

    async def __aenter__(self) -> Self:
        for c in self.clients:
            await c.__aenter__()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        for c in self.clients:
            await c.aclose()


class Trainers(Clients):
    """``workers`` SDK clients over ``urls``; ``outcomes`` fills in as the burst runs."""

    def __init__(
        self,
        urls: Sequence[str],
        token: str,
        run: str,
        image: str,
        clock: Clock,
        *,
        workers: int = 8,
        lease_s: int = 60,
    ) -> None:
        self.run, self.image, self.now = run, image, clock
        self.clients = [
            AsyncSandman(
                urls[i % len(urls)],
                token,
                owner=f"{run}-w{i}",
                lease_s=lease_s,
                release_on_exit=False,  # released explicitly, then counted
            )
            for i in range(workers)
        ]
        self.outcomes: list[TrainerOutcome] = []
        self._waits = [asyncio.Semaphore(WAITS_PER_CLIENT) for _ in self.clients]

    @property
    def owners(self) -> list[str]:
        return [c.owner for c in self.clients]

    # --- the burst ------------------------------------------------------------------------
    async def burst(self, n: int, window_s: float, batch: int, ready_timeout_s: float) -> None:
        """``n`` sandboxes in batch creates spread over ``window_s``, each waited for until
        ready, a typed failure, or ``ready_timeout_s`` after the first request (then: lost)."""
        deadline = self.now() + ready_timeout_s
        plan = schedule(n, window_s, batch)
        tasks: list[asyncio.Task[None]] = []
        for k, (at, size) in enumerate(plan):
            delay = at - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self._chunk(k, size, deadline)))
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - self.now()) + 5)
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _chunk(self, k: int, size: int, deadline: float) -> None:
        w = k % len(self.clients)
        created = await create_batch(
            self.clients[w], f"{self.run}-{k}", size, self.image, self.now, self.outcomes
        )
        await asyncio.gather(*(self._wait(m, sb, deadline, self._waits[w]) for m, sb in created))

    async def _wait(
        self, m: TrainerOutcome, sb: AsyncSandbox, deadline: float, slots: asyncio.Semaphore
    ) -> None:
        async with slots:
            try:
                await sb.wait_ready(timeout_s=max(0.1, deadline - self.now()))
            except SandboxTimeout:
                m.outcome, m.reason = "lost", "no answer by the deadline"
                return
            except Exception as e:
                self._failed(m, e)
                return
        m.ready, m.outcome = self.now(), "ready"

    def _failed(self, m: TrainerOutcome, e: BaseException) -> None:
        record_failure(m, e, self.now())

    # --- after the fault ------------------------------------------------------------------
    async def audit(self) -> None:
        """GET every sandbox the trainer holds as ready: still ready, ended with a typed
        reason (failed), or unknown to the facade (lost)."""
        client = self.clients[0]
        sem = asyncio.Semaphore(64)

        async def one(m: TrainerOutcome) -> None:
            async with sem:
                try:
                    view = (await client.get(m.sandbox_id)).view
                except SandboxNotFound:
                    m.outcome, m.reason = "lost", "sandbox_not_found"
                    return
                except SandmanError as e:
                    m.outcome, m.reason, m.typed = "failed", e.reason, is_typed(e.reason)
                    return
            if view.state in ("terminated", "failed"):
                m.outcome, m.ended = "failed", m.ended or self.now()
                m.reason, m.typed = view.reason or view.state, is_typed(view.reason)

        await asyncio.gather(*(one(m) for m in self.outcomes if m.outcome == "ready"))

    async def release(self) -> int:
        """One release per owner (what a trainer does at the end of its run)."""
        released = 0
        for c in self.clients:
            with contextlib.suppress(SandmanError):
                released += await c.release_owner()
        for m in self.outcomes:
            m.released = True
        return released


# --- the trainer that dies -------------------------------------------------------------------
async def _dying_trainer(a: argparse.Namespace) -> int:
    out = Path(a.ids_file)
    async with AsyncSandman(a.url, a.token, owner=a.owner, lease_s=a.lease_s) as client:
        sandboxes = await client.create_many(a.count, a.image, wait=False, idempotency_key=a.owner)
        out.write_text(json.dumps([sb.id for sb in sandboxes]))
        await asyncio.gather(*(sb.wait_ready() for sb in sandboxes))
        print("ready", flush=True)
        await asyncio.Event().wait()  # until SIGKILLed
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.faults.trainer", description=__doc__)
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--lease-s", type=int, required=True)
    p.add_argument("--image", required=True)
    p.add_argument("--ids-file", required=True)
    return asyncio.run(_dying_trainer(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
