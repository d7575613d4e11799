"""Benchmark of the placement engine: ``python -m load.bench.scheduler`` (``make bench-scheduler``).

Phases (each prints a progress line):

1. plan the reference burst, 11,858 sandboxes of 250m CPU / 512 MiB, onto 400 nodes of
   16 CPU / 64 GiB / 110 pods that other tenants already use at ~30%: median time to plan,
   placements per second, nodes used against the lower bound (with the burst cap, which
   spreads on purpose, and with pure packing);
2. the same batch onto 5,000 nodes;
3. the same burst with one image per task (16 sandboxes per task image, each image
   prepared on 3 nodes), at 400 and 5,000 nodes: hundreds of equivalence classes;
4. memory of the model holding 5,000 nodes and 150,000 pods (tracemalloc);
5. cost per incremental pod event (add pending / update running / delete) on that model.

Why plans are timed on decoded pods: the controller decodes each pending pod once, when its
watch event arrives, so decoding cost is spread over arrival and reported separately here.
The objects built during set-up are frozen out of the garbage collector (``gc.freeze()``,
which a long-running controller does after its initial list) so a collection of the
cluster model is not billed to whichever phase it happens to land in; ``--no-gc-freeze``
measures without that.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.engine import Scheduler
from scheduler.fit import slots_for
from scheduler.model import Pod
from scheduler.settings import SchedulerSettings

__all__ = ["BenchConfig", "main", "run"]

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class BenchConfig:
    pods: int = 11_858
    nodes: int = 400
    big_nodes: int = 5_000
    memory_pods: int = 150_000
    events: int = 60_000
    runs: int = 7
    foreign_share: float = 0.30
    seed: int = 1
    gc_freeze: bool = True
    #: "One image per task": pods per task image, and nodes each image is prepared on.
    pods_per_task: int = 16
    image_copies: int = 3


QUICK = BenchConfig(pods=600, nodes=20, big_nodes=200, memory_pods=3_000, events=2_000, runs=2)


def node_obj(name: str) -> Json:
    alloc = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_obj(
    uid: str, cpu_m: int, mem_mi: int, node: str | None, phase: str, image: str = "task:1"
) -> Json:
    spec: Json = {
        "containers": [
            {
                "name": "main",
                "image": f"registry.local/{image}",
                "resources": {"requests": {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi"}},
            }
        ],
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    meta = {"uid": uid, "namespace": "sandboxes", "name": uid}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def foreign_pods(rng: random.Random, node: str, share: float) -> list[Json]:
    """Other tenants' pods filling about ``share`` of a 16 CPU / 64 GiB node."""
    out: list[Json] = []
    cpu_left, mem_left = int(16_000 * share), int(65_536 * share)
    while cpu_left > 100 and mem_left > 128:
        cpu = min(cpu_left, rng.choice([100, 250, 500, 1000, 2000]))
        mem = min(mem_left, rng.choice([128, 512, 2048, 4096, 8192]))
        out.append(pod_obj(f"foreign-{node}-{len(out)}", cpu, mem, node, "Running"))
        cpu_left, mem_left = cpu_left - cpu, mem_left - mem
    return out


def build_cluster(n_nodes: int, cfg: BenchConfig, settings: SchedulerSettings) -> Scheduler:
    rng = random.Random(cfg.seed)
    s = Scheduler(settings)
    for i in range(n_nodes):
        name = f"node-{i:05d}"
        s.upsert_node(node_obj(name))
        for obj in foreign_pods(rng, name, cfg.foreign_share):
            s.upsert_pod(obj)
    return s


def lower_bound(s: Scheduler, pod: Pod, count: int, cap: int | None = None) -> int:
    """Fewest nodes that can hold ``count`` such pods: the nodes with most free slots first.

    With ``cap``, a node counts for at most ``cap`` pods (the burst policy's start queue); if
    even every node at the cap cannot hold the batch, every node is needed.
    """
    slots = [slots_for(pod.shape.requests, s.free(n)) for n in s.model.nodes]
    if cap is not None:
        slots = [min(free, cap) for free in slots]
    held, used = 0, 0
    for free in sorted(slots, reverse=True):
        if held >= count:
            break
        held += free
        used += 1
    return used


def progress(message: str) -> None:
    print(f"[load.bench.scheduler] {message}", flush=True)


def timed_plans(s: Scheduler, pods: Sequence[Pod], runs: int) -> tuple[list[float], Any]:
    """Plan ``runs`` times (each from the same state: reservations are forgotten untimed)."""
    times, plan = [], None
    for _ in range(runs):
        start = time.perf_counter()
        plan = s.plan(pods, now=0.0)
        times.append(time.perf_counter() - start)
        for a in plan.assignments:
            s.forget(a.uid)
    return times, plan


def plan_phase(label: str, n_nodes: int, cfg: BenchConfig) -> dict[str, Any]:
    progress(f"{label}: building {n_nodes} nodes with ~{cfg.foreign_share:.0%} foreign usage")
    s = build_cluster(n_nodes, cfg, SchedulerSettings())
    objs = [pod_obj(f"sandbox-{i}", 250, 512, None, "Pending") for i in range(cfg.pods)]
    start = time.perf_counter()
    pods = [s.model.decoder.pod(o) for o in objs]
    decode_us = (time.perf_counter() - start) / len(pods) * 1e6
    _freeze(cfg)
    bound = lower_bound(s, pods[0], len(pods))
    bound_burst = lower_bound(s, pods[0], len(pods), s.settings.max_starting_per_node)
    cap = s.settings.max_starting_per_node
    progress(f"{label}: planning {len(pods)} pods x {cfg.runs} runs (burst cap {cap})")
    times, plan = timed_plans(s, pods, cfg.runs)
    packed = replace(s.settings, max_starting_per_node=None)
    s2 = Scheduler(packed)
    s2.model = s.model
    progress(f"{label}: planning {len(pods)} pods x {cfg.runs} runs (pure packing)")
    times_packed, plan_packed = timed_plans(s2, pods, cfg.runs)
    median = statistics.median(times)
    return {
        "phase": label,
        "nodes": n_nodes,
        "pods": len(pods),
        "placed": len(plan.assignments),
        "plan_ms_median": median * 1e3,
        "plan_ms_min": min(times) * 1e3,
        "placements_per_s": len(plan.assignments) / median,
        "nodes_used_burst": plan.nodes_used,
        "lower_bound_nodes_burst": bound_burst,
        "max_per_node_burst": max(plan.by_node().values()),
        "plan_ms_median_packing": statistics.median(times_packed) * 1e3,
        "placements_per_s_packing": len(plan_packed.assignments) / statistics.median(times_packed),
        "nodes_used_packing": plan_packed.nodes_used,
        "lower_bound_nodes": bound,
        "decode_us_per_pending_pod": decode_us,
    }


def images_phase(label: str, n_nodes: int, cfg: BenchConfig) -> dict[str, Any]:
    """The same burst with one image per task, each image prepared on a few nodes."""
    tasks = -(-cfg.pods // cfg.pods_per_task)
    progress(f"{label}: {tasks} task images, each prepared on {cfg.image_copies} nodes")
    s = build_cluster(n_nodes, cfg, SchedulerSettings())
    rng, names = random.Random(cfg.seed + 1), sorted(s.model.nodes)
    prepared: dict[str, set[str]] = {name: set() for name in names}
    for task in range(tasks):
        for name in rng.sample(names, min(cfg.image_copies, len(names))):
            prepared[name].add(f"registry.local/task-{task}:1")
    for name, images in prepared.items():
        s.set_prepared_images(name, images)
    pods = [
        s.decode_pod(
            pod_obj(f"sb-{i}", 250, 512, None, "Pending", f"task-{i // cfg.pods_per_task}:1")
        )
        for i in range(cfg.pods)
    ]
    _freeze(cfg)
    cap = s.settings.max_starting_per_node
    progress(f"{label}: planning {len(pods)} pods x {cfg.runs} runs (burst cap {cap})")
    times, plan = timed_plans(s, pods, cfg.runs)
    image_of = {p.uid: p.shape.images[0] for p in pods}
    hits = sum(1 for a in plan.assignments if image_of[a.uid] in s.model.prepared[a.node])
    median = statistics.median(times)
    return {
        "phase": label,
        "nodes": n_nodes,
        "pods": len(pods),
        "classes": plan.classes,
        "placed": len(plan.assignments),
        "plan_ms_median": median * 1e3,
        "placements_per_s": len(plan.assignments) / median,
        "on_a_node_with_the_image": hits,
    }


def memory_phase(cfg: BenchConfig) -> tuple[dict[str, Any], Scheduler]:
    per_node = cfg.memory_pods // cfg.big_nodes
    progress(f"memory: {cfg.big_nodes} nodes, {per_node * cfg.big_nodes} pods under tracemalloc")
    gc.collect()
    tracemalloc.start()
    s = Scheduler()
    for i in range(cfg.big_nodes):
        name = f"node-{i:05d}"
        s.upsert_node(node_obj(name))
        for j in range(per_node):
            s.upsert_pod(pod_obj(f"{name}-pod-{j}", 250, 512, name, "Running"))
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    held = s.model.held_pods()
    return {
        "phase": "memory",
        "nodes": cfg.big_nodes,
        "pods": held,
        "model_mb": current / 2**20,
        "peak_mb": peak / 2**20,
        "bytes_per_pod": current / max(held, 1),
    }, s


def event_phase(s: Scheduler, cfg: BenchConfig) -> dict[str, Any]:
    progress(f"events: {cfg.events} pod events x {cfg.runs} rounds on the big model")
    nodes = sorted(s.model.nodes)
    results: list[float] = []
    for r in range(cfg.runs):
        uids = [f"ev-{r}-{i}" for i in range(cfg.events // 3)]
        events: list[tuple[Callable[[Any], None], Json]] = []
        for k, uid in enumerate(uids):
            node = nodes[k % len(nodes)]
            events.append((s.upsert_pod, pod_obj(uid, 250, 512, node, "Pending")))
        for k, uid in enumerate(uids):
            events.append((s.upsert_pod, pod_obj(uid, 250, 512, nodes[k % len(nodes)], "Running")))
        for uid in uids:
            events.append((s.delete_pod, {"metadata": {"uid": uid}}))
        _freeze(cfg)
        start = time.perf_counter()
        for apply, obj in events:
            apply(obj)
        results.append((time.perf_counter() - start) / len(events))
    return {
        "phase": "events",
        "events": len(events),
        "us_per_event_median": statistics.median(results) * 1e6,
    }


def _freeze(cfg: BenchConfig) -> None:
    gc.collect()
    if cfg.gc_freeze:
        gc.freeze()


def run(cfg: BenchConfig) -> list[dict[str, Any]]:
    """Every phase in order; objects frozen out of the GC are released at the end."""
    try:
        results = [
            plan_phase(f"{cfg.nodes} nodes", cfg.nodes, cfg),
            plan_phase(f"{cfg.big_nodes} nodes", cfg.big_nodes, cfg),
            images_phase(f"{cfg.nodes} nodes, image per task", cfg.nodes, cfg),
            images_phase(f"{cfg.big_nodes} nodes, image per task", cfg.big_nodes, cfg),
        ]
        memory, big = memory_phase(cfg)
        results += [memory, event_phase(big, cfg)]
        return results
    finally:
        gc.unfreeze()


def report(results: list[dict[str, Any]]) -> str:
    lines = []
    for r in results:
        fields = ", ".join(
            f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
            for k, v in r.items()
            if k != "phase"
        )
        lines.append(f"{r['phase']}: {fields}")
    return "\n".join(lines)


def _summary() -> str:
    return (__doc__ or "").split("\n", 1)[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m load.bench.scheduler", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--runs", type=int, help="timed runs per phase (median reported)")
    parser.add_argument(
        "--no-gc-freeze", action="store_true", help="leave set-up objects in the GC"
    )
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else BenchConfig()
    if args.runs:
        cfg = replace(cfg, runs=args.runs)
    if args.no_gc_freeze:
        cfg = replace(cfg, gc_freeze=False)
    progress(f"python {sys.version.split()[0]}, config {cfg}")
    results = run(cfg)
    print(report(results), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
