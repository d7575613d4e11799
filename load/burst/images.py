"""The per-task-image burst: ``python -m load.burst.images``.

RL task images come one per task (SWE-style datasets: hundreds of 1-3 GiB images), so a
training step's burst is hundreds of images times a few sandboxes each. This series runs
that burst — by default 742 task images x 16 sandboxes, 1 GiB each (the profile's default
size), through the facade on ``paper-burst`` with a node agent per node — in three modes,
each on a fresh stack:

- **preloaded**: every image present on every node before the burst (the reference burst's
  assumption, and the best case);
- **unprepared**: nothing present; every image is pulled by the kubelets during the burst;
- **announced**: the trainer announces the images and counts ahead, through the SDK
  (``client.prepare``: ``POST /v1/prepare``, an ``ImagePreparation`` in its namespace); the
  controller plans the pulls, the agents pull them, and the burst starts when
  ``wait_ready(1.0)`` returns — what a trainer overlapping step t+1's pulls with step t's
  rollouts does.

``--modes operator`` runs the same with an operator's standing request (an
``ImagePreparation`` created in Sandman's namespace directly) instead of the facade;
``announced-min`` is ``announced`` with the controller's spread over spare room off
(``--prepare-spread-images-per-node 0``: only ``ceil(count / start-queue cap)`` nodes per
image), to measure what the spread buys in the same series. The announced modes fire when
``wait_ready(1.0)`` returns *and* every planned node holds its image (the spread's pulls
finished: nothing is pulling when the burst starts); both times are reported.

Per mode: time to all-Ready, requested→Ready percentiles, pulls per image and the most pulls
of one image in flight at once (simcluster's pull accounting, all nodes), the preparation's
own time and pulls, and a lower bound that includes pulls: the API-budget bound of the
reference burst, and for images that must be pulled during the burst, the last image's
first request plus one cold pull plus a container start, or the nodes' pull throughput
(pulls / (nodes x parallelism) rounds), whichever is larger. The report is Markdown and
JSON in ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from devstack.stack import SANDMAN_NAMESPACE, Stack, StackSettings
from kube import ClientSettings, KubeClient
from kube.contract import LABEL_OWNER
from kube.preparation_contract import IMAGE_PREPARATIONS
from load.burst import analysis as an
from load.burst.cluster import MetricsReader
from load.burst.driver import FacadeDriver
from load.burst.progress import Progress
from load.burst.recorder import PodRecorder
from load.burst.settings import BurstSettings, profile_budget
from sandman.sdk import AsyncSandman, PreparationTimeout
from simcluster.profile import load_profile

__all__ = ["MODES", "PREPARING", "ImageMixSettings", "ModeResult", "main", "run_series"]

MODES = ("preloaded", "unprepared", "announced")
#: Modes that prepare before the burst (besides the series' default three: ``operator``,
#: ``announced-min``).
PREPARING = ("announced", "announced-min", "operator")
TENANT, TOKEN = "bench", "bench-token-0123456789abcdef"


@dataclass(frozen=True, slots=True)
class ImageMixSettings:
    out: Path
    images: int = 742
    per_image: int = 16
    window_s: float = 10.0
    profile: str = "paper-burst"
    nodes: int | None = None
    overrides: tuple[str, ...] = ()
    modes: tuple[str, ...] = MODES
    #: The controller's cluster-wide bound on nodes pulling one image (preparation).
    max_pulls_per_image: int = 16
    ready_timeout_s: float = 900.0
    prepare_timeout_s: float = 900.0
    image_prefix: str = "registry.bench/task-"

    @property
    def sandboxes(self) -> int:
        return self.images * self.per_image

    def image_list(self) -> tuple[str, ...]:
        return tuple(f"{self.image_prefix}{i:04d}:1" for i in range(self.images))


@dataclass(slots=True)
class ModeResult:
    mode: str
    sandboxes: int
    ready: int
    all_ready_s: float
    p50_s: float
    p90_s: float
    p99_s: float
    max_s: float
    lower_bound_s: float
    bound_by: str
    pulls_per_image: float  # during the burst
    images_pulled: int  # during the burst
    peak_pulls_of_one_image: float  # over the whole run (preparation included)
    prepare_s: float = math.nan
    prepare_pulls: float = 0.0
    #: Announced modes: seconds until every planned node held its image (after ready).
    settled_s: float = math.nan
    #: The node agents' process (one core per node): RSS at the end, CPU over the run.
    agents_rss_mib: float = math.nan
    agents_cpu_s: float = math.nan
    notes: list[str] = field(default_factory=list)


def _stack(s: ImageMixSettings, mode: str, workdir: Path) -> StackSettings:
    images = s.image_list() if mode == "preloaded" else ()
    return StackSettings(
        workdir=workdir,
        profile=s.profile,
        nodes=s.nodes,
        simcluster_overrides=s.overrides,
        preloaded_images=images,
        controller_args=(
            "--client-qps",
            "500",
            "--client-burst",
            "500",
            "--progress-interval-s",
            "10",
            "--prepare-max-pulls-per-image",
            str(s.max_pulls_per_image),
            *(("--prepare-spread-images-per-node", "0") if mode == "announced-min" else ()),
        ),
        tenants=(TENANT,),
        tenant_tokens={TENANT: TOKEN},
        max_sandboxes=20_000,
        create_rate_per_s=5_000,
        create_burst=12_000,
        node_agents=True,
        start_timeout_s=600.0,
    )


_PULLS = re.compile(r'^simcluster_image_pulls_by_image_total\{image="([^"]+)"\} (\S+)$', re.M)
_PEAK = re.compile(r'^simcluster_image_pull_peak_concurrency\{image="([^"]+)"\} (\S+)$', re.M)


def _pulls(text: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in _PULLS.finditer(text)}


def _peak(text: str) -> float:
    return max((float(m[2]) for m in _PEAK.finditer(text)), default=0.0)


async def _announce(s: ImageMixSettings, stack: Stack, owner: str, say: Any) -> tuple[float, float]:
    """The trainer's announcement through the SDK; seconds until ``wait_ready(1.0)`` and
    until every planned node holds its image."""
    start = time.monotonic()
    client = AsyncSandman(stack.url, TOKEN, owner=owner, lease_s=None, release_on_exit=False)
    async with client:
        prep = await client.prepare({i: s.per_image for i in s.image_list()})
        bar = Progress("sandboxes prepared", s.sandboxes)
        while time.monotonic() - start < s.prepare_timeout_s:
            try:
                await prep.wait_ready(1.0, timeout_s=5.0, poll_s=1.0)
            except PreparationTimeout:
                eta = prep.view.eta_s
                bar.update(prep.view.sandboxes_ready, f"phase {prep.view.phase} eta {eta}")
                continue
            bar.close(prep.view.sandboxes_ready)
            ready = time.monotonic() - start
            return ready, await _settled(s, prep, start, say)
    bar.close(0)
    say("the announcement did not get ready in time")
    return math.nan, math.nan


async def _settled(s: ImageMixSettings, prep: Any, start: float, say: Any) -> float:
    """Seconds (from ``start``) until every planned node of every image holds it."""
    planned = sum(i.nodes_planned for i in prep.view.images)
    bar = Progress("planned nodes holding their image", planned)
    while time.monotonic() - start < s.prepare_timeout_s:
        images = prep.view.images
        held = sum(min(i.nodes_ready, i.nodes_planned) for i in images)
        bar.update(held, f"of {sum(i.nodes_planned for i in images)} planned")
        if all(i.nodes_ready >= i.nodes_planned for i in images):
            bar.close(held)
            return time.monotonic() - start
        await asyncio.sleep(1.0)
        await prep.refresh()
    bar.close(0)
    say("the spread's pulls did not finish in time: firing anyway")
    return math.nan


async def _prepare(s: ImageMixSettings, admin: KubeClient, say: Any) -> float:
    """An operator's standing request for every image; seconds until its status is Ready."""
    body = {
        "apiVersion": "sandman.io/v1alpha1",
        "kind": "ImagePreparation",
        "metadata": {"name": "bench-step"},
        "spec": {"images": [{"image": i, "count": s.per_image} for i in s.image_list()]},
    }
    start = time.monotonic()
    await admin.create(IMAGE_PREPARATIONS, body, SANDMAN_NAMESPACE)
    bar = Progress("images prepared", s.images)
    while time.monotonic() - start < s.prepare_timeout_s:
        obj = await admin.get(IMAGE_PREPARATIONS, "bench-step", SANDMAN_NAMESPACE)
        status = obj.get("status") or {}
        done = sum(1 for i in status.get("images") or () if i["nodesReady"] >= i["nodesWanted"] > 0)
        bar.update(done, f"phase {status.get('phase', '-')}")
        if status.get("phase") == "Ready":
            bar.close(done)
            return time.monotonic() - start
        await asyncio.sleep(1.0)
    bar.close(0)
    say("preparation did not finish in time")
    return math.nan


async def _burst(s: ImageMixSettings, stack: Stack, admin: KubeClient, owner: str) -> PodRecorder:
    recorder = PodRecorder(admin, stack.namespace(), f"{LABEL_OWNER}={owner}")
    await recorder.start()
    driver = FacadeDriver(stack.url, stack.token, owner, "", s.per_image, images=s.image_list())

    def stamp(sid: str, requested: float, created: float) -> None:
        sb = recorder.get(sid)
        sb.requested, sb.created = requested, created

    recorder.t0 = time.monotonic()
    fire = asyncio.create_task(driver.fire(s.sandboxes, s.window_s, recorder.now, stamp))
    bar = Progress("ready", s.sandboxes)
    try:
        while recorder.now() < s.ready_timeout_s:
            c = recorder.counts
            bar.update(c["ready"], f"created {driver.stats.created:,} bound {c['bound']:,}")
            if c["ready"] + c["failed"] >= s.sandboxes and fire.done():
                break
            await asyncio.sleep(0.2)
        bar.close(recorder.counts["ready"])
        await fire
        await driver.release()
    finally:
        if not fire.done():
            fire.cancel()
        await driver.close()
        await recorder.stop()
    return recorder


def mode_lower_bound(s: ImageMixSettings, mode: str, last_request_s: float) -> tuple[float, str]:
    burst = BurstSettings(out=s.out, sandboxes=s.sandboxes, window_s=s.window_s,
                          profile=s.profile, nodes=s.nodes, overrides=s.overrides)  # fmt: skip
    budget = profile_budget(burst)
    model = an.BudgetModel(
        sandboxes=s.sandboxes,
        mutating_qps=budget.mutating_qps,
        mutating_burst=budget.mutating_burst,
        container_start_s=budget.container_start_s,
        arrival_window_s=s.window_s,
        nodes=budget.nodes,
        kubelet_creation_rate=budget.creation_rate,
        # The stack's facade pre-places (its default): one write per sandbox before Ready.
        # Counting two here made an announced 742 x 16 run read "efficiency 1.00" at ~0.5
        # of the one-write bound.
        writes_per_sandbox=burst.writes_per_sandbox,
    )
    bound, which = an.lower_bound_s(model)
    if mode != "unprepared":
        return bound, which
    cs = load_profile(s.profile, dict(o.split("=", 1) for o in s.overrides))
    pull = cs.node.pull
    latency = pull.latency(s.image_list()[-1])
    slots = budget.nodes * (pull.parallelism or 1_000_000)
    rounds = math.ceil(s.images / slots)
    by_arrival = last_request_s + latency + budget.container_start_s
    by_throughput = rounds * latency + budget.container_start_s
    pull_bound = max(by_arrival, by_throughput)
    if pull_bound > bound:
        return pull_bound, "pulls (last image's request + one cold pull + a start)"
    return bound, which


async def run_mode(s: ImageMixSettings, mode: str, say: Any) -> ModeResult:
    workdir = s.out / mode
    owner = f"mix-{mode}-{int(time.time())}"
    async with Stack(_stack(s, mode, workdir / "stack"), say) as stack:
        admin_settings = ClientSettings(qps=0, max_connections=8, max_attempts=10)
        async with await KubeClient.connect(
            admin_settings, kubeconfig=str(stack.kubeconfig)
        ) as admin:
            metrics = MetricsReader(stack.kubeconfig)
            prepare_s, settled_s, pulls_before = math.nan, math.nan, _pulls(await metrics.text())
            if mode in ("announced", "announced-min"):
                say("announcing every image through POST /v1/prepare")
                prepare_s, settled_s = await _announce(s, stack, owner, say)
            elif mode == "operator":
                say("preparing: an operator's ImagePreparation for every image")
                prepare_s = await _prepare(s, admin, say)
            at_burst = _pulls(await metrics.text())
            say(f"{mode}: firing {s.sandboxes:,} sandboxes of {s.images} images")
            recorder = await _burst(s, stack, admin, owner)
            text = await metrics.text()
            rss, cpu = _process_figures(stack, "agents")
    after = _pulls(text)
    burst_pulls = {i: after.get(i, 0.0) - at_burst.get(i, 0.0) for i in after}
    pulled = [v for v in burst_pulls.values() if v > 0]
    rows = [r for r in recorder.sandboxes.values() if r.requested is not None]
    waits = [r.ready - r.requested for r in rows if r.ready is not None and r.requested is not None]
    # Every pod of the run counts for "all Ready" (a batch whose response was lost under load
    # still created its pods); the percentiles need the request's stamp.
    ready = sorted(r.ready for r in recorder.sandboxes.values() if r.ready is not None)
    last_request = max((r.requested for r in rows if r.requested is not None), default=0.0)
    bound, which = mode_lower_bound(s, mode, last_request)
    pct = an.percentile
    return ModeResult(
        mode=mode,
        sandboxes=s.sandboxes,
        ready=len(ready),
        all_ready_s=ready[s.sandboxes - 1] if len(ready) >= s.sandboxes else math.nan,
        p50_s=pct(waits, 50) if waits else math.nan,
        p90_s=pct(waits, 90) if waits else math.nan,
        p99_s=pct(waits, 99) if waits else math.nan,
        max_s=max(waits, default=math.nan),
        lower_bound_s=bound,
        bound_by=which,
        pulls_per_image=sum(pulled) / s.images,
        images_pulled=len(pulled),
        peak_pulls_of_one_image=_peak(text),
        prepare_s=prepare_s,
        settled_s=settled_s,
        prepare_pulls=sum(at_burst.get(i, 0.0) - pulls_before.get(i, 0.0) for i in at_burst),
        agents_rss_mib=rss,
        agents_cpu_s=cpu,
    )


def _process_figures(stack: Stack, name: str) -> tuple[float, float]:
    """RSS (MiB) now and CPU seconds so far of one of the stack's processes."""
    proc = stack.processes.get(name)
    if proc is None:
        return math.nan, math.nan
    try:
        p = psutil.Process(proc.pid)
        times = p.cpu_times()
        return p.memory_info().rss / 2**20, times.user + times.system
    except psutil.Error:
        return math.nan, math.nan


async def run_series(s: ImageMixSettings, say: Any) -> list[ModeResult]:
    s.out.mkdir(parents=True, exist_ok=True)
    results = []
    for mode in s.modes:
        say(f"=== mode {mode} ===")
        results.append(await run_mode(s, mode, say))
        (s.out / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    (s.out / "report.md").write_text(report(s, results))
    return results


def report(s: ImageMixSettings, results: list[ModeResult]) -> str:
    base = next((r.all_ready_s for r in results if r.mode == "preloaded"), math.nan)
    lines = [
        f"# Per-task-image burst: {s.images} images x {s.per_image} sandboxes "
        f"({s.sandboxes:,}) within {s.window_s:g} s on {s.profile}",
        "",
        "| mode | all Ready (s) | vs preloaded | lower bound (s) | efficiency | requested→Ready "
        "p50 / p90 / p99 / max (s) | pulls per image (burst) | peak pulls of one image | "
        "preparation (s, pulls) | agents: RSS (MiB), CPU (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        prep = "—" if math.isnan(r.prepare_s) else f"{r.prepare_s:.1f} s, {r.prepare_pulls:.0f}"
        if not math.isnan(r.settled_s):
            prep += f" (all planned nodes: {r.settled_s:.1f} s)"
        lines.append(
            f"| {r.mode} | {r.all_ready_s:.1f} | {r.all_ready_s / base:.2f}x | "
            f"{r.lower_bound_s:.1f} ({r.bound_by}) | "
            f"{an.efficiency(r.lower_bound_s, r.all_ready_s):.2f} | "
            f"{r.p50_s:.1f} / {r.p90_s:.1f} / {r.p99_s:.1f} / {r.max_s:.1f} | "
            f"{r.pulls_per_image:.2f} | {r.peak_pulls_of_one_image:.0f} | {prep} | "
            f"{r.agents_rss_mib:.0f}, {r.agents_cpu_s:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.burst.images", description=__doc__)
    d = ImageMixSettings(out=Path("."))
    p.add_argument("--out", default=f"build/bench-images/{time.strftime('%Y%m%d-%H%M%S')}")
    p.add_argument("--images", type=int, default=d.images)
    p.add_argument("--per-image", type=int, default=d.per_image)
    p.add_argument("--window", type=float, default=d.window_s)
    p.add_argument("--profile", default=d.profile)
    p.add_argument("--nodes", type=int)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--modes", default=",".join(d.modes))
    p.add_argument("--max-pulls-per-image", type=int, default=d.max_pulls_per_image)
    a = p.parse_args(argv)
    s = ImageMixSettings(
        out=Path(a.out).resolve(), images=a.images, per_image=a.per_image, window_s=a.window,
        profile=a.profile, nodes=a.nodes, overrides=tuple(a.set),
        modes=tuple(m for m in a.modes.split(",") if m),
        max_pulls_per_image=a.max_pulls_per_image,
    )  # fmt: skip
    known = (*MODES, *PREPARING)
    for mode in s.modes:
        if mode not in known:
            p.error(f"unknown mode {mode!r} ({', '.join(dict.fromkeys(known))})")

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    results = asyncio.run(run_series(s, say))
    print(report(s, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
