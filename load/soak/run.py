"""The soak's run: a stack with two facade replicas and a few process nodes, the churn plan
through the SDK, a sampler (RSS of every server process, live sandbox pods, the facade's
cached pods, the controller's GC deletions), then release, leak check and the verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import psutil

from devstack.stack import Stack, StackSettings
from kube import NODES, PODS, ClientSettings, KubeClient
from kube.contract import LABEL_SANDBOX
from load.burst.progress import Progress
from load.burst.run import TENANT, TOKEN
from load.faults.cluster import FaultRecorder
from load.faults.outcomes import FaultFigures, figures
from load.shapes import ChurnShape
from load.soak.analysis import Sample, arrivals, rss_growth
from load.soak.churn import PROC_CLASS, Churn, ToolStats
from load.soak.settings import SoakSettings
from simcluster.cluster import RUNTIME_LABEL

__all__ = ["SoakResult", "run_soak"]

SERVERS = ("simcluster", "controller", "facade", "facade-2")
Say = Callable[[str], None]


@dataclass(slots=True)
class SoakResult:
    settings: SoakSettings
    scale: str
    figures: FaultFigures
    tools: ToolStats
    samples: list[Sample]
    growth: dict[str, float]  # process -> RSS growth after the warm-up
    peak_live: int
    notes: list[str] = field(default_factory=list)


def _stack_settings(s: SoakSettings) -> StackSettings:
    proc = {
        "name": PROC_CLASS,
        "cpu": "250m",
        "memory": "512Mi",
        "node_selector": {RUNTIME_LABEL: "process"},
        "tolerations": [{"key": RUNTIME_LABEL, "operator": "Equal", "value": "process",
                         "effect": "NoSchedule"}],
    }  # fmt: skip
    return StackSettings(
        workdir=s.out / "stack",
        profile=s.profile,
        nodes=s.nodes,
        simcluster_overrides=(f"nodes.process_count={s.process_nodes if s.tool_workers else 0}",),
        preloaded_images=(s.image,),
        controller_args=(
            "--client-qps",
            "500",
            "--client-burst",
            "500",
            "--gc-terminal-retention-s",
            "5",
        ),
        facade_replicas=s.facade_replicas,
        extra_classes=(proc,),
        tenants=(TENANT,),
        tenant_tokens={TENANT: TOKEN},
        max_sandboxes=20_000,
        create_rate_per_s=5_000,
        create_burst=12_000,
    )


async def run_soak(s: SoakSettings, say: Say) -> SoakResult:
    s.out.mkdir(parents=True, exist_ok=True)
    shape = ChurnShape(base=s.base, peak=s.peak, day_s=s.duration_s / s.days, days=s.days)
    plan = arrivals(s.sandboxes, s.duration_s, shape)
    async with (
        Stack(_stack_settings(s), say) as stack,
        await KubeClient.connect(
            ClientSettings(qps=0, max_connections=8, max_attempts=10),
            kubeconfig=str(stack.kubeconfig),
        ) as admin,
    ):
        nodes = len((await admin.list(NODES)).get("items") or [])
        scale = (
            f"{s.sandboxes:,} sandboxes over {s.duration_s:,.0f} s on {s.profile} ({nodes} nodes, "
            f"{s.process_nodes if s.tool_workers else 0} of them running real daemons), "
            f"{len(stack.urls)} facade replicas"
        )
        recorder = FaultRecorder(admin, stack.namespace())
        await recorder.start()
        try:
            result = await _run(s, stack, admin, recorder, plan, scale, say)
        finally:
            await recorder.stop()
    return result


async def _run(
    s: SoakSettings,
    stack: Stack,
    admin: KubeClient,
    recorder: FaultRecorder,
    plan: list[int],
    scale: str,
    say: Say,
) -> SoakResult:
    run = f"soak{int(time.time()) % 100_000}"
    churn = Churn(stack.urls, stack.token, run, s.image, recorder.now, workers=s.workers,
                  hold_s=s.hold_s, ready_timeout_s=s.ready_timeout_s)  # fmt: skip
    samples: list[Sample] = []
    async with churn:
        recorder.t0 = time.monotonic()
        say(f"soak: {scale}; peak {max(plan)} sandboxes/s, each held {s.hold_s:g} s")
        tools = [asyncio.create_task(churn.tool_loop(k)) for k in range(s.tool_workers)]
        sampler = asyncio.create_task(_sample(s, stack, recorder, churn, samples))
        await churn.run_plan(plan, 0.0)
        churn.stopping.set()
        await asyncio.gather(*tools)
        say("soak: plan done; releasing every owner")
        for client in churn.clients:
            with contextlib.suppress(Exception):
                await client.release_owner()
        deadline = time.monotonic() + s.cleanup_timeout_s
        while recorder.live and time.monotonic() < deadline:  # noqa: ASYNC110 - a watch's state
            await asyncio.sleep(0.5)
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    leaked = len((await admin.list(PODS, stack.namespace(), label_selector=LABEL_SANDBOX))["items"])
    warmup = s.duration_s * s.warmup_share
    growth = {p: rss_growth(samples, p, warmup) for p in SERVERS}
    return SoakResult(
        settings=s,
        scale=scale,
        figures=figures(churn.outcomes, recorder.lives.values(), leaked, {}),
        tools=churn.tools,
        samples=samples,
        growth={p: g for p, g in growth.items() if not math.isnan(g)},
        peak_live=max((x.live for x in samples), default=0),
    )


_GAUGE = re.compile(r"^(sandman_facade_cached_pods|sandman_gc_deletions_total)(\{[^}]*\})? (\S+)$")


async def _scrape(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with http.get(f"{url}/metrics") as r:
            for line in (await r.text()).splitlines():
                m = _GAUGE.match(line)
                if m:
                    out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


async def _sample(
    s: SoakSettings, stack: Stack, recorder: FaultRecorder, churn: Churn, out: list[Sample]
) -> None:
    bar = Progress("requested", s.sandboxes, log_every_s=30)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while True:
            rss = {}
            for name in SERVERS:
                proc = stack.processes.get(name)
                if proc is not None:
                    with contextlib.suppress(psutil.Error):
                        rss[name] = psutil.Process(proc.pid).memory_info().rss
            facade = await _scrape(http, stack.url)
            controller = await _scrape(http, stack.controller_url)
            out.append(Sample(
                t=recorder.now(),
                live=len(recorder.live),
                ready_total=churn.ready,
                rss=rss,
                cached_pods=facade.get("sandman_facade_cached_pods", math.nan),
                gc_deletions=controller.get("sandman_gc_deletions_total", 0.0),
            ))  # fmt: skip
            mib = " ".join(f"{k} {v / 2**20:.0f}" for k, v in rss.items())
            bar.update(len(churn.outcomes), f"live {len(recorder.live):,} RSS MiB: {mib}")
            await asyncio.sleep(s.sample_every_s)
