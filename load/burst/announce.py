"""``--announce``: the burst's sandboxes announced through the SDK, the pool filled, then claimed.

What a trainer does with issue 23's announced pools: during step t it announces step t+1's
sandboxes (``client.prepare([(image, count)], sandboxes=True, class_=...)``: one
``ImagePreparation`` with a pod template, ``POST /v1/prepare``), the leading controller's
pool filler creates them pre-placed through its own priority level (controller/pools.py),
and step t+1's creates claim them — one ``SandboxClaim`` per batch (facade/pooled.py →
controller/claims.py). Here the announcement is the burst's own image and class, a share
(``--announce-fraction``) of its count; the benchmark waits until the announcement's status
says the pool is filled (the trainer's view, polled through the SDK), then fires the burst
exactly as the cold one (load/burst/driver.py).

Why a second pod watch: a claimed pool pod is not relabelled (a claim costs one write per
batch, not a patch per pod; kube/pool_contract.py), so the burst's watch by owner label
never sees it. The pool watch (``sandman.io/pool``, every pool pod of the run's fresh
stack) stamps the fill — when each pool pod was stored and Ready — and :meth:`Pool.adopt`
joins a create's answer to it: an answered sandbox that is a pool pod Ready before the
answer is a claimed row, Ready for its request when the answer arrived
(``max(answer, pod Ready)``; SandboxTimes.claimed). One whose claim could not be delivered
is deleted by the facade and created cold under another name, which the owner watch sees.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from devstack.stack import Stack
from kube import KubeClient
from kube.pool_contract import LABEL_POOL
from load.burst import analysis as an
from load.burst.cluster import MetricsReader
from load.burst.progress import Progress
from load.burst.recorder import PodRecorder
from load.burst.settings import BurstSettings
from sandman.sdk import AsyncPreparation, AsyncSandman
from sandman.wire.facade import DEFAULT_CLASS
from sandman.wire.image_preparation import PoolProgress

__all__ = ["Fill", "Pool", "fill_pool", "pool_controller_args", "stop_pool"]

Say = Callable[[str], None]
#: Between fill decisions of the pool filler in announce mode (its ``--pools-interval-s``):
#: each decision creates at most ``--pools-batch`` pods, so the batch is sized from it.
FILL_INTERVAL_S = 0.2
#: How often the benchmark polls the announcement (``GET /v1/prepare/{id}``, the SDK).
POLL_S = 0.5


def pool_controller_args(s: BurstSettings, level_qps: float) -> tuple[str, ...]:
    """The controller flags that let the filler use its level's budget: its own bucket at
    ``s.pool_qps`` (else the level's rate, else ``controller_qps``), one second of it as the
    burst, and decisions large and frequent enough not to cap the rate below it (a decision
    creates at most ``--pools-batch`` pods, then waits ``--pools-interval-s``)."""
    if not s.announce:
        return ()
    qps = s.pool_qps or (level_qps if level_qps < float("inf") else s.controller_qps)
    batch = max(1, round(2 * qps * FILL_INTERVAL_S))
    return (
        "--pools-qps", f"{qps:g}", "--pools-burst", str(max(1, round(qps))),
        "--pools-interval-s", f"{FILL_INTERVAL_S:g}", "--pools-batch", str(batch),
    )  # fmt: skip


@dataclass(slots=True)
class Fill:
    """What the fill measured, before analysis. Times on the pool recorder's clock: 0 =
    the announcement sent."""

    announced: int
    preparation: str
    #: The announcement's status first showed every slot Ready (what a trainer waits for).
    status_filled_s: float
    before: an.ApiCounters
    after: an.ApiCounters
    cpu_s: dict[str, float]
    status: PoolProgress = field(default_factory=PoolProgress)


class Pool:
    """The run's announced pool: its pod watch and what the fill measured."""

    def __init__(self, recorder: PodRecorder, fill: Fill) -> None:
        self.recorder = recorder
        self.fill = fill
        self.claimed = 0

    def adopt(self, burst: PodRecorder, sb: an.SandboxTimes) -> None:
        """A create answered ``sb``: if it is a pool pod that was Ready, it was claimed —
        Ready for its request at the answer, on the burst's clock."""
        pod = self.recorder.sandboxes.get(sb.id)
        if sb.claimed or pod is None or pod.ready is None or sb.created is None:
            return
        pod_ready = self.recorder.t0 + pod.ready - burst.t0
        sb.claimed, sb.node = True, pod.node
        sb.ready = max(sb.created, pod_ready)
        burst.counts["ready"] += 1
        self.claimed += 1


async def fill_pool(
    s: BurstSettings,
    stack: Stack,
    admin: KubeClient,
    metrics: MetricsReader,
    owner: str,
    cpu: Callable[[], dict[str, float]],
    say: Say,
) -> Pool:
    """Announce ``s.announced`` sandboxes through the SDK and wait until the pool is filled
    (the status's ``pool.ready``), with a progress line. Raises RuntimeError when the
    announcement is refused, ends, or is not filled within ``s.fill_timeout_s``."""
    recorder = PodRecorder(admin, stack.namespace(), LABEL_POOL)
    await recorder.start()
    try:
        n = s.announced
        before, cpu_before = await metrics.read(), cpu()
        say(f"announcing {n:,} sandboxes of {s.image} (prepare, sandboxes=True) and filling")
        client = AsyncSandman(
            stack.url, stack.token, owner=owner, lease_s=None, release_on_exit=False
        )
        async with client:
            recorder.t0 = time.monotonic()
            prep = await client.prepare([(s.image, n)], sandboxes=True, class_=DEFAULT_CLASS)
            status = await _wait_filled(prep, recorder, n, s.fill_timeout_s)
        filled_s = recorder.now()
        await _until_watched(recorder, n)
        after = await metrics.read()
        spent = {k: v - cpu_before.get(k, 0.0) for k, v in cpu().items()}
    except BaseException:
        await recorder.stop()
        raise
    fill = Fill(n, prep.id, filled_s, before, after, spent, status)
    return Pool(recorder, fill)


async def _wait_filled(
    prep: AsyncPreparation, recorder: PodRecorder, n: int, timeout_s: float
) -> PoolProgress:
    bar = Progress("pool ready", n)
    pool = PoolProgress()
    while True:
        view = await prep.refresh()
        pool = view.pool or PoolProgress()
        bar.update(
            pool.ready,
            f"created {pool.created:,} (watch: stored {len(recorder.live):,} "
            f"Ready {recorder.counts['ready']:,})",
        )
        if pool.ready >= n:
            bar.close(pool.ready)
            return pool
        if view.phase in ("Invalid", "Expired"):
            raise RuntimeError(f"announcement {prep.id} is {view.phase}: {view.message or ''}")
        if recorder.now() > timeout_s:
            bar.close(pool.ready)
            raise RuntimeError(f"the pool was not filled within {timeout_s:g} s: {pool}")
        await asyncio.sleep(POLL_S)


async def _until_watched(recorder: PodRecorder, n: int, timeout_s: float = 30.0) -> None:
    """The status is the controller's; the benchmark's watch may lag it by an event or two:
    until it has seen every pool pod Ready too (the claimed rows need their Ready stamp)."""
    deadline = time.monotonic() + timeout_s
    while recorder.counts["ready"] < n:
        if time.monotonic() > deadline:
            seen = recorder.counts["ready"]
            raise RuntimeError(f"the pool watch saw {seen:,} of {n:,} pool pods Ready")
        await asyncio.sleep(0.05)


async def stop_pool(pool: Pool | None) -> None:
    """Stop the pool watch (nothing to do without a pool)."""
    if pool is not None:
        await pool.recorder.stop()
