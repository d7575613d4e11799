"""One fault run: a fresh stack, the burst through the SDK, the fault injected into it, the
audit, the release, the leak check; then the series of them.

Why a fresh stack per fault: a fault leaves state behind (a deleted node, a restarted
process, a lapsed lease); each fault's figures must be its own. Timestamps are the run's
clock (seconds since the first request), the same for the trainers, the recorder and the
injector.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from devstack.stack import Stack, StackSettings
from kube import NODES, PODS, ClientSettings, KubeClient
from kube.contract import LABEL_SANDBOX
from load.burst.analysis import ApiCounters
from load.burst.cluster import MetricsReader
from load.burst.progress import Progress
from load.burst.run import TENANT, TOKEN
from load.faults.cluster import AdminFaults, FaultRecorder
from load.faults.faults import FAULTS, SANDMAN_USER, Fault, FaultContext
from load.faults.outcomes import FaultFigures, PodLife, TrainerOutcome, figures
from load.faults.settings import FaultSettings
from load.faults.trainer import Trainers

__all__ = ["FaultResult", "run_fault", "run_series"]

Say = Callable[[str], None]


@dataclass(slots=True)
class FaultResult:
    fault: Fault
    scale: str  # "2,000 sandboxes on paper-burst (400 nodes)"
    figures: FaultFigures
    injected_at: float | None
    outcomes: list[TrainerOutcome]
    pods: list[PodLife]
    ready_series: list[tuple[float, int]]  # (t, Ready so far, trainer side)
    api_errors: dict[str, float]  # code -> Sandman's requests answered with it
    notes: list[str] = field(default_factory=list)
    error: str = ""  # the run could not complete


def _stack_settings(s: FaultSettings, fault: Fault, name: str) -> StackSettings:
    qps = s.leader_fault_qps if fault.controller_replicas > 1 else s.controller_qps
    burst = 10 if fault.controller_replicas > 1 else s.controller_burst
    return StackSettings(
        workdir=s.out / name / "stack",
        profile=s.daemon_profile if fault.process_runtime else s.profile,
        nodes=None if fault.process_runtime else s.nodes,
        preloaded_images=(s.image,),
        controller_args=(
            "--client-qps",
            f"{qps:g}",
            "--client-burst",
            str(burst),
            "--gc-terminal-retention-s",
            "5",
        ),
        controller_replicas=fault.controller_replicas,
        facade_replicas=fault.facade_replicas,
        tenants=(TENANT,),
        tenant_tokens={TENANT: TOKEN},
        max_sandboxes=20_000,
        create_rate_per_s=5_000,
        create_burst=12_000,
    )


def _size(s: FaultSettings, fault: Fault) -> int:
    return s.daemon_sandboxes if fault.process_runtime else s.sandboxes


async def run_fault(s: FaultSettings, name: str, say: Say) -> FaultResult:
    fault = FAULTS[name]
    stack_settings = _stack_settings(s, fault, name)
    stack_settings.workdir.mkdir(parents=True, exist_ok=True)
    n = _size(s, fault)
    run_settings = dataclasses.replace(s, sandboxes=n)
    async with (
        Stack(stack_settings, say) as stack,
        await KubeClient.connect(
            ClientSettings(qps=0, max_connections=8, max_attempts=10),
            kubeconfig=str(stack.kubeconfig),
        ) as admin,
    ):
        nodes = len((await admin.list(NODES)).get("items") or [])
        scale = f"{n:,} sandboxes on {stack_settings.profile} ({nodes} nodes)"
        metrics = MetricsReader(stack.kubeconfig)
        before = await metrics.read()
        recorder = FaultRecorder(admin, stack.namespace())
        await recorder.start()
        try:
            result = await _run(run_settings, fault, stack, admin, recorder, say, scale)
        finally:
            await recorder.stop()
        delta = (await metrics.read()).minus(before)
        result.api_errors = _sandman_errors(delta)
    return result


def _sandman_errors(delta: ApiCounters) -> dict[str, float]:
    return {c: delta.code_count(c, SANDMAN_USER) for c in ("429", "500", "409")}


async def _run(
    s: FaultSettings,
    fault: Fault,
    stack: Stack,
    admin: KubeClient,
    recorder: FaultRecorder,
    say: Say,
    scale: str,
) -> FaultResult:
    run = f"f{int(time.time()) % 100_000}"
    trainers = Trainers(stack.urls, stack.token, run, s.image, recorder.now, workers=s.workers)
    done = asyncio.Event()
    ctx = FaultContext(s, stack, admin, AdminFaults(stack.kubeconfig), recorder, trainers, done)
    series: list[tuple[float, int]] = []
    async with trainers:
        recorder.t0 = time.monotonic()
        say(f"{fault.name}: {scale}, {s.workers} SDK clients over {len(stack.urls)} facade(s)")
        burst = asyncio.create_task(
            trainers.burst(s.sandboxes, s.window_s, s.batch, s.ready_timeout_s)
        )
        inject = asyncio.create_task(fault.inject(ctx))
        await _follow(burst, trainers, s.sandboxes, series, recorder)
        done.set()
        error = ""
        sampling = asyncio.create_task(_sample_until(inject, trainers, series, recorder))
        try:
            async with asyncio.timeout(120):
                await inject
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            say(f"{fault.name}: the fault could not complete: {error}")
        await sampling
        await _restore(stack)
        say(
            f"{fault.name}: auditing "
            f"{sum(o.outcome == 'ready' for o in trainers.outcomes):,} ready sandboxes"
        )
        await trainers.audit()
        released = await trainers.release()
        say(f"{fault.name}: released {released:,}; waiting for every pod to go")
        leaked = await _leaked(admin, recorder, stack.namespace(), s.cleanup_timeout_s)
    outcomes = trainers.outcomes + ctx.extra_outcomes
    pods = list(recorder.lives.values())
    return FaultResult(
        fault=fault,
        scale=scale,
        figures=figures(outcomes, pods, leaked, ctx.detections),
        injected_at=ctx.injected_at,
        outcomes=outcomes,
        pods=pods,
        ready_series=series,
        api_errors={},
        notes=ctx.notes,
        error=error,
    )


async def _follow(
    burst: asyncio.Task[None],
    trainers: Trainers,
    n: int,
    series: list[tuple[float, int]],
    recorder: FaultRecorder,
) -> None:
    bar = Progress("ended", n)
    while not burst.done():
        ended = sum(1 for o in trainers.outcomes if o.outcome != "pending")
        ready = sum(1 for o in trainers.outcomes if o.outcome == "ready")
        series.append((recorder.now(), ready))
        bar.update(ended, f"ready {ready:,} bound {recorder.counts['bound']:,}")
        await asyncio.sleep(0.1)
    await burst
    bar.close(sum(1 for o in trainers.outcomes if o.outcome != "pending"))


async def _sample_until(
    task: asyncio.Future[None],
    trainers: Trainers,
    series: list[tuple[float, int]],
    recorder: FaultRecorder,
) -> None:
    """Keep the Ready series going while a fault outlives the burst (its detection)."""
    while not task.done():
        series.append((recorder.now(), sum(1 for o in trainers.outcomes if o.outcome == "ready")))
        await asyncio.sleep(0.1)


async def _restore(stack: Stack) -> None:
    """Whatever a fault left down comes back before the audit (a Deployment would)."""
    for name in (*stack.controllers(), *stack.facades()):
        if name not in stack.processes:
            with contextlib.suppress(Exception):
                await stack.start_again(name)


async def _leaked(admin: KubeClient, recorder: FaultRecorder, ns: str, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while recorder.live and time.monotonic() < deadline:  # noqa: ASYNC110 - a watch's state
        await asyncio.sleep(0.2)
    listing = await admin.list(PODS, ns, label_selector=LABEL_SANDBOX)
    return len(listing.get("items") or [])


async def run_series(s: FaultSettings, say: Say) -> list[FaultResult]:
    names = s.faults or tuple(FAULTS)
    results = []
    for i, name in enumerate(names, 1):
        say(f"fault {i}/{len(names)}: {name}")
        results.append(await run_fault(s, name, say))
    return results
