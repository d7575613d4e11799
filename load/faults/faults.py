"""The faults, each injected into a running burst: how it is done, what counts as affected,
and which signal is its *time to detect*.

- ``facade-stop``: SIGSTOP one of two facade replicas, SIGCONT after ``facade_pause_s``;
  detected when the replica answers ``/readyz`` again.
- ``facade-kill``: SIGKILL one of two replicas, restarted after ``facade_down_s``; detected
  when the restarted replica answers ``/readyz``.
- ``node-delete``: delete the node with the most live sandboxes mid-burst; detected when the
  facade reports each of its sandboxes ``terminated`` / ``node_lost``.
- ``api-errors``: 5% of Sandman's API requests answered 429 or 500, every watch dropped every
  3 s; nothing to detect (retries absorb it).
- ``trainer-dies``: SIGKILL a trainer process holding ready sandboxes under its owner lease;
  detected when the facade reports each of them ``terminated`` / ``owner_expired``.
- ``daemon-kill``: SIGKILL the daemon (PID 1) of ready sandboxes (process runtime); detected
  when the facade reports each ended with a reason.
- ``leader-kill``: SIGKILL the leading controller of two mid-burst; detected at the
  standby's first bind.

A fault waits for its moment (a share of the burst bound or Ready), stamps ``injected_at`` on
the run's clock, and records one detection time per affected item.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from devstack.stack import Stack, StackError
from kube import KubeClient
from load.burst.progress import say
from load.faults.cluster import AdminFaults, FaultRecorder, daemon_processes
from load.faults.outcomes import TrainerOutcome
from load.faults.settings import FaultSettings
from load.faults.trainer import Trainers

__all__ = ["FAULTS", "Fault", "FaultContext"]

SANDMAN_USER = "system:serviceaccount:sandman-system:sandman-controller"


@dataclass(slots=True)
class FaultContext:
    """What an injector gets: the stack, the observers, the trainers, the run's clock."""

    settings: FaultSettings
    stack: Stack
    admin: KubeClient
    faults: AdminFaults
    recorder: FaultRecorder
    trainers: Trainers
    burst_done: asyncio.Event
    injected_at: float | None = None
    detections: dict[str, float | None] = field(default_factory=dict)
    extra_outcomes: list[TrainerOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def now(self) -> float:
        return self.recorder.now()

    def mark(self, what: str) -> float:
        self.injected_at = self.now()
        say(f"fault: {what} at t={self.injected_at:.2f} s")
        return self.injected_at

    async def until(
        self, check: Callable[[], bool], timeout_s: float = 120.0, *, burst_bound: bool = True
    ) -> bool:
        """Poll ``check`` every 50 ms until it holds, the burst ends (unless not
        ``burst_bound``) or the timeout."""
        deadline = self.now() + timeout_s
        while not check():
            if (burst_bound and self.burst_done.is_set()) or self.now() > deadline:
                return check()
            await asyncio.sleep(0.05)
        return True

    def ready_share(self) -> float:
        return self.recorder.counts["ready"] / max(1, self.settings.sandboxes)

    def bound_share(self) -> float:
        return self.recorder.counts["bound"] / max(1, self.settings.sandboxes)

    async def probe_states(
        self, ids: list[str], ended: Callable[[dict[str, Any]], bool], timeout_s: float = 60.0
    ) -> None:
        """GET each id through the facade every 0.2 s until ``ended(view)``; the time since
        the injection is each id's detection (None if never within ``timeout_s``)."""
        assert self.injected_at is not None
        for sid in ids:
            self.detections[sid] = None
        headers = {"Authorization": f"Bearer {self.stack.token}"}
        async with aiohttp.ClientSession(self.stack.url, headers=headers) as http:
            deadline = self.now() + timeout_s
            waiting = set(ids)
            while waiting and self.now() < deadline:
                for sid in list(waiting):
                    async with http.get(f"/v1/sandboxes/{sid}") as r:
                        view = await r.json(content_type=None) if r.status < 500 else {}
                    if r.status == 200 and ended(view):
                        self.detections[sid] = self.now() - self.injected_at
                        waiting.discard(sid)
                await asyncio.sleep(0.2)

    async def until_serving(self, url: str, timeout_s: float = 60.0) -> float | None:
        """Seconds from the injection until ``url``/readyz answers 200 (None: never)."""
        assert self.injected_at is not None
        deadline = self.now() + timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.5)) as http:
            while self.now() < deadline:
                try:
                    async with http.get(f"{url}/readyz") as r:
                        if r.status == 200:
                            return self.now() - self.injected_at
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.05)
        return None


Injector = Callable[[FaultContext], Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class Fault:
    name: str
    title: str
    detect: str  # what "detected" means for this fault
    inject: Injector
    facade_replicas: int = 1
    controller_replicas: int = 1
    process_runtime: bool = False  # needs real daemons (the daemon profile, a small burst)


def _ended_with(reason: str) -> Callable[[dict[str, Any]], bool]:
    return lambda v: v.get("state") in ("terminated", "failed") and v.get("reason") == reason


def _ended(view: dict[str, Any]) -> bool:
    return view.get("state") in ("terminated", "failed") and bool(view.get("reason"))


async def _facade_stop(ctx: FaultContext) -> None:
    await ctx.until(lambda: ctx.bound_share() >= 0.1)
    ctx.mark("SIGSTOP facade-2")
    ctx.stack.send_signal("facade-2", signal.SIGSTOP)
    await asyncio.sleep(ctx.settings.facade_pause_s)
    ctx.stack.send_signal("facade-2", signal.SIGCONT)
    say("fault: SIGCONT facade-2")
    ctx.detections["facade-2"] = await ctx.until_serving(ctx.stack.urls[1])


async def _facade_kill(ctx: FaultContext) -> None:
    await ctx.until(lambda: ctx.bound_share() >= 0.1)
    ctx.mark("SIGKILL facade-2")
    await ctx.stack.kill("facade-2")
    await asyncio.sleep(ctx.settings.facade_down_s)
    say("fault: restarting facade-2")
    restart = asyncio.create_task(ctx.stack.start_again("facade-2"))
    ctx.detections["facade-2"] = await ctx.until_serving(ctx.stack.urls[1])
    await restart


async def _node_delete(ctx: FaultContext) -> None:
    await ctx.until(lambda: ctx.ready_share() >= 0.3)
    node = ctx.recorder.busiest_node()
    if not node:
        raise StackError("no node holds a sandbox to delete")
    ids = ctx.recorder.live_on(node)
    ctx.mark(f"delete {node} ({len(ids)} live sandboxes)")
    answer = await ctx.faults.inject(kind="node-delete", node=node)
    ctx.notes.append(f"deleted {node}: {answer.get('pods_lost', '?')} pods on it")
    await ctx.probe_states(ids, _ended_with("node_lost"))


async def _api_errors(ctx: FaultContext) -> None:
    s = ctx.settings
    ctx.mark(f"{s.api_error_rate:.0%} of Sandman's API requests → 429/500; watches dropped")
    await ctx.faults.inject(
        kind="api-errors", verb="*", rate=s.api_error_rate, code=[429, 500], user=SANDMAN_USER
    )
    drops = 0
    try:
        while not ctx.burst_done.is_set():
            try:
                async with asyncio.timeout(s.drop_watches_every_s):
                    await ctx.burst_done.wait()
            except TimeoutError:
                await ctx.faults.inject(kind="drop-watches")
                drops += 1
    finally:
        await ctx.faults.inject(kind="clear")
    ctx.notes.append(f"every watch dropped {drops} times during the burst")


async def _trainer_dies(ctx: FaultContext) -> None:
    s, stack = ctx.settings, ctx.stack
    ids_file = stack.settings.workdir / "dying-trainer-ids.json"
    owner = f"{ctx.trainers.run}-dying"
    proc = await stack.spawn(
        "dying-trainer",
        [
            "-m", "load.faults.trainer", "--url", stack.url, f"--token={stack.token}",
            "--owner", owner, "--count", str(s.dying_trainer_sandboxes),
            "--lease-s", str(s.dying_trainer_lease_s), "--image", s.image,
            "--ids-file", str(ids_file),
        ],
    )  # fmt: skip
    log = stack.log_path("dying-trainer")

    def ready() -> bool:
        if proc.returncode is not None:
            raise StackError(f"the dying trainer exited early; see {log}")
        return b"ready" in log.read_bytes()

    # Not bound by the burst: a small one is Ready before the trainer process has started.
    if not await ctx.until(ready, timeout_s=s.ready_timeout_s, burst_bound=False):
        raise StackError(f"the dying trainer never had its sandboxes ready; see {log}")
    ids: list[str] = json.loads(ids_file.read_text())
    ctx.extra_outcomes += [
        TrainerOutcome(f"{owner}/{i}", sid, outcome="ready") for i, sid in enumerate(ids)
    ]
    ctx.mark(
        f"SIGKILL the trainer holding {len(ids)} ready sandboxes "
        f"(lease {s.dying_trainer_lease_s} s)"
    )
    await stack.kill("dying-trainer")
    await ctx.probe_states(ids, _ended_with("owner_expired"))
    for o in ctx.extra_outcomes:
        if ctx.detections.get(o.sandbox_id) is not None:
            o.outcome, o.reason, o.released = "failed", "owner_expired", True


async def _daemon_kill(ctx: FaultContext) -> None:
    await ctx.until(lambda: ctx.ready_share() >= 1.0, timeout_s=ctx.settings.ready_timeout_s)
    ready = [o.sandbox_id for o in ctx.trainers.outcomes if o.outcome == "ready"]
    victims = {ctx.recorder.ips[sid]: sid for sid in ready[: ctx.settings.daemons_killed]}
    procs = daemon_processes(ctx.stack.processes["simcluster"].pid, set(victims))
    if len(procs) < len(victims):
        raise StackError(f"found {len(procs)} of {len(victims)} daemon processes to kill")
    ctx.mark(f"SIGKILL {len(procs)} sandbox daemons")
    for proc in procs.values():
        proc.kill()
    await ctx.probe_states(list(victims.values()), _ended)


async def _leader_kill(ctx: FaultContext) -> None:
    await ctx.until(lambda: ctx.bound_share() >= 0.25)
    leader = await ctx.stack.leader()
    standby = next(c for c in ctx.stack.controllers() if c != leader)
    at = ctx.mark(f"SIGKILL the leader {leader} ({ctx.recorder.counts['bound']} bound)")
    await ctx.stack.kill(leader)
    while await ctx.stack.leader() != standby and ctx.now() - at < 60:  # noqa: ASYNC110 - the Lease is another process's state
        await asyncio.sleep(0.05)
    leads = ctx.now()
    ctx.notes.append(f"{standby} held the Lease {leads - at:.2f} s after the kill")
    # Binds stamped before the standby led are the dead leader's last answers (or the
    # watch's lag); the standby's first is the first after it took the Lease.
    key = "first bind by the standby"
    ctx.detections[key] = None
    while ctx.now() - at < 60 and ctx.recorder.counts["bound"] < ctx.settings.sandboxes:
        later = [s.bound for s in ctx.recorder.sandboxes.values() if s.bound and s.bound > leads]
        if later:
            ctx.detections[key] = min(later) - at
            return
        await asyncio.sleep(0.05)


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("facade-stop", "facade replica SIGSTOP / SIGCONT", "the replica answers /readyz "
              "again after SIGCONT", _facade_stop, facade_replicas=2),
        Fault("facade-kill", "facade replica SIGKILL, restarted", "the restarted replica "
              "answers /readyz", _facade_kill, facade_replicas=2),
        Fault("node-delete", "node deleted mid-burst", "the facade reports each of its "
              "sandboxes terminated / node_lost", _node_delete),
        Fault("api-errors", "5% API 429/500 + dropped watches", "n/a (absorbed by retries)",
              _api_errors),
        Fault("trainer-dies", "trainer SIGKILLed (owner lease lapses)", "the facade reports "
              "each of its sandboxes terminated / owner_expired", _trainer_dies),
        Fault("daemon-kill", "sandbox daemon SIGKILLed", "the facade reports each sandbox "
              "ended with a reason", _daemon_kill, process_runtime=True),
        Fault("leader-kill", "controller leader SIGKILLed", "the standby's first bind",
              _leader_kill, controller_replicas=2),
    )
}  # fmt: skip
