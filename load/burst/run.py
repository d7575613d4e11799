"""The burst benchmark's phases: stack up → burst → all Ready → release → baseline → report.

Why one run holds everything it compares: the machine is shared and noisy (BENCHMARKS.md),
so the lower bound comes from this run's profile, the writes from this run's API counters,
and the baseline binds on the same cluster minutes after the Sandman phase; the report
quotes ratios within the run. This module drives the phases and measures; what the
measurements come to (the lower bound, the notes, the checks) is ``results.py``'s, pure.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import aiohttp
import psutil

from devstack.stack import Stack, StackSettings
from kube import PODS, ClientSettings, KubeClient, Timeouts
from kube.contract import LABEL_OWNER
from kube.placement import PLACEMENT_PATH
from kube.pool_contract import LABEL_POOL
from load.burst import apf
from load.burst.announce import Pool, fill_pool, pool_controller_args, stop_pool
from load.burst.baseline import SCHEDULER_NAME as BASELINE_SCHEDULER
from load.burst.classes import census, class_sequence
from load.burst.cluster import MetricsReader, count_pods, facade_counters, run_sandboxes
from load.burst.driver import DirectDriver, Driver, FacadeDriver
from load.burst.kills import FacadeKiller, LeaderKiller
from load.burst.progress import Progress
from load.burst.recorder import PodRecorder
from load.burst.report import BaselineResult, BurstResult
from load.burst.results import SandmanPhase, analyse, baseline_result, describe_mode
from load.burst.settings import BurstSettings, ProfileBudget, profile_budget
from simcluster.profile import ProfileError, load_profile

TENANT = "bench"
TOKEN = "bench-token-0123456789abcdef"  # the benchmark tenant's bearer token (loopback only)

__all__ = ["TENANT", "TOKEN", "run_burst"]

Say = Callable[[str], None]


def _stack_settings(s: BurstSettings) -> StackSettings:
    """The production process topology (devstack/stack.py): one tenant whose own limits never
    bind in a burst (the benchmark measures the cluster), the task image preloaded on every
    node (the node agent's job), and no facade in ``--direct`` mode."""
    controller = (
        "--client-qps",
        f"{s.controller_qps:g}",
        "--client-burst",
        str(s.controller_burst),
    )
    fixed = () if s.pacer else ("--no-client-pacer",)
    pools = pool_controller_args(s, profile_budget(s).pool_qps) if s.announce else ()
    progress = ("--progress-interval-s", "10")
    return StackSettings(
        workdir=s.out / "stack",
        profile=s.profile,
        nodes=s.nodes,
        simcluster_overrides=(*s.overrides, *_announce_overrides(s)),
        preloaded_images=(s.image,),
        controller_args=(*controller, *fixed, *progress, *pools, *s.controller_args),
        facade_replicas=0 if s.direct else 1 if s.kill_facade_at is None else 2,
        facade_args=("--creation", s.creation, *fixed),
        controller_replicas=1 if s.kill_leader_at is None else 2,
        election_args=(),  # the controller's own defaults (controller/leader.py)
        tenants=(TENANT,),
        tenant_tokens={TENANT: TOKEN},
        extra_classes=tuple(dict(c.entry) for c in s.classes),
        max_sandboxes=20_000,
        create_rate_per_s=5_000,
        create_burst=12_000,
    )


#: With --announce on a virtual runtime: virtual pods answer the daemon's /healthz and
#: /v1/claim on their podIP, so the facade can deliver each claim (a claim no daemon takes
#: is deleted and its member created cold: the run would measure the fallback).
VIRTUAL_DAEMON = "nodes.virtual_daemon=true"


def _announce_overrides(s: BurstSettings) -> tuple[str, ...]:
    """The simcluster overrides --announce adds: virtual daemons on a virtual runtime
    (the process runtime runs real daemons). RuntimeError when this simcluster cannot."""
    if not s.announce:
        return ()
    overrides = dict(o.split("=", 1) for o in s.overrides)
    if load_profile(s.profile, overrides).runtime != "virtual":
        return ()
    key, value = VIRTUAL_DAEMON.split("=", 1)
    try:
        load_profile(s.profile, {**overrides, key: value})
    except ProfileError as e:
        raise RuntimeError(
            f"--announce on a virtual runtime needs simcluster's {key} (virtual pods that "
            f"answer the daemon's claims): {e}; or run with --set runtime=process"
        ) from e
    return (VIRTUAL_DAEMON,)


def _client_settings() -> ClientSettings:
    """The direct creator's client: the facade's default client-side limit (QPS 1000,
    burst 2000), so both paths offer the API server the same load (unlimited, the creates
    drew ~11,000 429s and starved the binds); patient retries; and a request timeout longer
    than the burst: 11,858 creates share 128 connections, and aiohttp's total timeout
    includes the wait for a pooled connection (a create that timed out is never repeated:
    it may have landed)."""
    return ClientSettings(
        timeouts=Timeouts(request_s=600),
        qps=1000,
        burst=2000,
        max_connections=128,
        max_attempts=50,
        max_retry_after_s=5,
    )


async def run_burst(s: BurstSettings, say: Say) -> BurstResult:
    s.out.mkdir(parents=True, exist_ok=True)
    (s.out / "stack").mkdir(exist_ok=True)
    budget = profile_budget(s)
    owner = f"burst-{int(time.time())}"
    async with Stack(_stack_settings(s), say) as stack:
        admin_settings = ClientSettings(qps=0, max_connections=8, max_attempts=10)
        admin_kc, sandman_kc = str(stack.kubeconfig), stack.service_kubeconfig
        async with (
            await KubeClient.connect(admin_settings, kubeconfig=admin_kc) as admin,
            await KubeClient.connect(_client_settings(), kubeconfig=sandman_kc) as sandman,
        ):
            metrics = MetricsReader(stack.kubeconfig)
            if s.apf == "manifests":
                budget = await _apply_apf(stack, metrics, budget, say)
            driver: Driver
            if s.direct:
                driver = DirectDriver(sandman, stack.namespace(), TENANT, owner, s.image)
            else:
                driver = FacadeDriver(
                    stack.url, stack.token, owner, s.image, s.batch,
                    classes=class_sequence(s.classes), replicas=tuple(stack.urls),
                )  # fmt: skip
            pool: Pool | None = None
            try:
                if s.announce:
                    cpu = lambda: _cpu_seconds(stack)  # noqa: E731
                    pool = await fill_pool(s, stack, admin, metrics, owner, cpu, say)
                phase = await _sandman_phase(s, admin, metrics, driver, owner, say, stack, pool)
            finally:
                await driver.close()
                await stop_pool(pool)
            baseline = None
            if s.baseline_sample > 0:
                baseline = await _baseline_phase(s, stack, admin, sandman, budget, owner, say)
    return analyse(s, budget, phase, baseline)


async def _apply_apf(
    stack: Stack, metrics: MetricsReader, budget: ProfileBudget, say: Say
) -> ProfileBudget:
    """--apf manifests: the manifests' APF objects applied; the budget their controller and
    facade levels get together, as simcluster resolved it."""
    say(f"applying {apf.FLOWCONTROL.relative_to(apf.FLOWCONTROL.parents[2])}")
    await apf.apply_flowcontrol(stack.kubeconfig, budget)
    return apf.shared_budget(budget, await metrics.text(), apf.sandman_levels())


async def _sandman_phase(
    s: BurstSettings,
    admin: KubeClient,
    metrics: MetricsReader,
    driver: Driver,
    owner: str,
    say: Say,
    stack: Stack,
    pool: Pool | None = None,
) -> SandmanPhase:
    ns = stack.namespace()
    selector = f"{LABEL_OWNER}={owner}"
    recorder = PodRecorder(admin, ns, selector)
    await recorder.start()
    try:
        before = await metrics.read()
        say(f"firing {s.sandboxes:,} sandbox requests within {s.window_s:g} s ({describe_mode(s)})")
        cpu_before, cpu_from = _cpu_seconds(stack), time.monotonic()
        kills = _Kills(s, stack, driver, recorder, say)
        if not s.direct and s.creation == "pre-placed":
            await _wait_placing(stack)
        await kills.leader.find_leader()
        poll = None if s.announce else kills.leader  # announced: on the answers (_Kills)
        await _burst(s, recorder, driver, s.sandboxes, s.ready_timeout_s, poll, pool)
        cpu = {k: v - cpu_before.get(k, 0.0) for k, v in _cpu_seconds(stack).items()}
        cpu_wall = time.monotonic() - cpu_from
        at_ready = await metrics.read()
        placement = await census(admin, ns, selector) if s.classes else None
        facade = None if s.direct else await facade_counters(_live_facades(stack))
        held_by = await run_sandboxes(admin, ns, owner)
        say("releasing every sandbox of the run (one request)")
        start = time.monotonic()
        await driver.release()
        held = {pod for pods in held_by.claims.values() for pod in pods}
        await _wait_gone(recorder, pool, held, s.sandboxes, s.release_timeout_s)
        release_s = time.monotonic() - start
        left = await count_pods(admin, ns, selector)
        if pool is not None:
            left += len(await _live_pool_pods(admin, ns) & held)
        after = await metrics.read()
    finally:
        await recorder.stop()
    return SandmanPhase(
        recorder, driver, before, after, left, release_s, cpu, cpu_wall, placement,
        kills.leader.killed_at, facade, at_ready, pool, kills.facade, held_by,
    )  # fmt: skip


class _Kills:
    """The run's two kills (load/burst/kills.py), the facade's and, in an announced burst,
    the leader's timed on the driver's answers: hooked onto the driver here."""

    def __init__(
        self, s: BurstSettings, stack: Stack, driver: Driver, recorder: PodRecorder, say: Say
    ) -> None:
        unit = "sandboxes answered" if s.announce else "bound"
        self.leader = LeaderKiller(stack, s.kill_leader_at, s.sandboxes, say, unit)
        self.facade: FacadeKiller | None = None
        if not isinstance(driver, FacadeDriver):
            return
        requests = -(-s.sandboxes // driver.batch)
        self.facade = FacadeKiller(stack, s.kill_facade_at, requests, say, driver)
        announce, facade = s.announce, self.facade

        async def answered() -> None:
            now = recorder.now()
            await facade.check(driver.answered, now)
            if announce:
                await self.leader.check(driver.stats.created, now)

        driver.on_answer = answered


def _live_facades(stack: Stack) -> list[str]:
    """The URLs of the facade replicas still running (a killed one has no counters)."""
    names = stack.facades()
    return [u for u, name in zip(stack.urls, names, strict=True) if name in stack.processes]


async def _live_pool_pods(admin: KubeClient, ns: str) -> set[str]:
    listing = await admin.list(PODS, ns, label_selector=LABEL_POOL)
    return {p["metadata"]["name"] for p in listing.get("items") or []}


def _cpu_seconds(stack: Stack) -> dict[str, float]:
    """user + system CPU of each stack process and of this one (the benchmark)."""
    procs = {name: psutil.Process(p.pid) for name, p in stack.processes.items()}
    procs["benchmark"] = psutil.Process()
    out = {}
    for name, proc in procs.items():
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            out[name] = t.user + t.system
    return out


async def _wait_placing(stack: Stack, timeout_s: float = 30.0) -> None:
    """Until a controller serves placements: a leader that has just started waits out any
    predecessor's placements first (controller/placement.py), and a burst fired into that
    wait would be measured against the fallback, not the fast path."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            for url in stack.controller_urls:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(url + PLACEMENT_PATH) as resp:
                        if resp.status == 200:
                            return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"no controller served placements within {timeout_s:g} s")


async def _burst(
    s: BurstSettings,
    recorder: PodRecorder,
    driver: Driver,
    n: int,
    timeout_s: float,
    killer: LeaderKiller | None = None,
    pool: Pool | None = None,
) -> None:
    """Fire ``n`` requests and wait until all are Ready (or failed, or the timeout); with a
    pool, an answered pool pod is a claimed row, Ready at its answer (``Pool.adopt``)."""

    def stamp(sid: str, requested: float, created: float) -> None:
        sb = recorder.get(sid)
        sb.requested, sb.created = requested, created
        if pool is not None:
            pool.adopt(recorder, sb)

    recorder.t0 = time.monotonic()
    fire = asyncio.create_task(driver.fire(n, s.window_s * n / s.sandboxes, recorder.now, stamp))
    bar = Progress("ready", n)
    try:
        while recorder.now() < timeout_s:
            c = recorder.counts
            bar.update(
                c["ready"],
                f"created {driver.stats.created:,} bound {c['bound']:,} "
                f"failed {c['failed']:,} 429 {driver.stats.throttled:,}",
            )
            if killer is not None:
                await killer.check(c["bound"], recorder.now())
            given_up = sum(driver.stats.failures.values())
            if c["ready"] + c["failed"] + given_up >= n and fire.done():
                break
            await asyncio.sleep(0.1)
        bar.close(recorder.counts["ready"])
    finally:
        if not fire.done():
            fire.cancel()
        await asyncio.gather(fire, return_exceptions=True)
    error = None if fire.cancelled() else fire.exception()
    if error is not None:
        raise RuntimeError(f"firing requests failed: {error!r}") from error


async def _wait_gone(
    recorder: PodRecorder, pool: Pool | None, held: set[str], n: int, timeout_s: float
) -> None:
    """Until the watches show none of the run's pods live: its own and the pool pods its
    claims hold (unclaimed pool pods are the announcement's, deleted with it), or the
    timeout."""
    bar = Progress("released", n)
    deadline = time.monotonic() + timeout_s

    def live() -> int:
        return len(recorder.live) + (len(pool.recorder.live & held) if pool else 0)

    while live() and time.monotonic() < deadline:
        bar.update(n - live())
        await asyncio.sleep(0.2)
    bar.close(n - live())


async def _baseline_phase(
    s: BurstSettings,
    stack: Stack,
    admin: KubeClient,
    sandman: KubeClient,
    budget: ProfileBudget,
    owner: str,
    say: Say,
) -> BaselineResult:
    """A sample of the burst bound by the one-at-a-time binder (its own process)."""
    sample = min(s.baseline_sample, s.sandboxes)
    ns = stack.namespace()
    owner = f"{owner}-baseline"
    recorder = PodRecorder(admin, ns, f"{LABEL_OWNER}={owner}")
    await recorder.start()
    driver = DirectDriver(sandman, ns, TENANT, owner, s.image, BASELINE_SCHEDULER)
    say(f"baseline: {sample:,} pods bound one at a time under QPS 50 / burst 100")
    proc = await stack.spawn(
        "baseline",
        [
            "-m", "load.burst.baseline", "--kubeconfig", stack.service_kubeconfig,
            "--namespace", ns, "--count", str(sample),
        ],
    )  # fmt: skip
    try:
        await _burst(s, recorder, driver, sample, s.ready_timeout_s)
        await driver.release()
        await _wait_gone(recorder, None, set(), sample, s.release_timeout_s)
    finally:
        await recorder.stop()
        stack.processes.pop("baseline", None)
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    return baseline_result(recorder, s.sandboxes, sample, budget.container_start_s)
