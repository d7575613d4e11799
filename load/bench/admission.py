"""What the hardening costs a creation burst: ``python -m load.bench.admission``.

The hardened pod (facade/podspec.py) costs a burst nothing in API writes — one create per
sandbox, as before — so what is left to measure is per pod: the bytes the hardening adds
to every create the API server decodes, stores and sends to every watcher, and the Pod
Security admission check the tenant namespace's ``restricted`` label makes the API server
run on each create (simcluster's implementation of upstream's checks,
simcluster/apiserver/podsecurity.py; a real kube-apiserver runs its own, in Go). Both are
scaled to the reference burst (11,858 sandboxes) and set beside that burst's API budget at
500 writes/s (2 ms per write).

Each figure is the median of ``--rounds`` timed rounds of ``--pods`` pods, hardened and
stripped interleaved in each round.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from facade.podspec import DaemonDelivery, SandboxClass, render_pod
from sandman.wire.facade import CreateSandbox
from simcluster.apiserver.podsecurity import LevelVersion, evaluate

__all__ = ["main"]

REFERENCE_BURST = 11_858
WRITE_BUDGET_S = 1 / 500
RESTRICTED = LevelVersion("restricted")
BASELINE = LevelVersion("baseline")


def hardened_pod(i: int) -> dict[str, Any]:
    """One sandbox pod as the facade renders it with the shipped default class and the
    production overlay's default delivery (the init container)."""
    return render_pod(
        CreateSandbox(image="registry.example/task:1", owner="run-1", env={"TASK": str(i)}),
        SandboxClass(name="tiny", cpu="250m", memory="512Mi", ephemeral_storage="1Gi"),
        DaemonDelivery("init-container", bundle_image="registry.example/sandman/bundle:0.1"),
        name=f"sb-{i:020x}",
        namespace="sandman-team-a",
        tenant="team-a",
        token="t" * 43,
        token_salt="0" * 16,
        now=datetime.now(UTC),
    )


def stripped(pod: dict[str, Any]) -> dict[str, Any]:
    """The same pod with the runtime's defaults: no securityContext, no user namespace."""
    pod = copy.deepcopy(pod)
    pod["spec"].pop("securityContext", None)
    pod["spec"].pop("hostUsers", None)
    for container in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", []):
        container.pop("securityContext", None)
    return pod


def _per_pod_us(fn: Callable[[int], object], pods: int) -> float:
    start = time.perf_counter()
    for i in range(pods):
        fn(i)
    return (time.perf_counter() - start) / pods * 1e6


def run(pods: int, rounds: int) -> dict[str, Any]:
    hardened = [hardened_pod(i) for i in range(pods)]
    plain = [stripped(p) for p in hardened]
    assert not evaluate(RESTRICTED, hardened[0]), "the rendered pod must pass restricted"
    series: dict[str, list[float]] = {}
    for _ in range(rounds):
        timings = {
            "render (hardened)": lambda i: hardened_pod(i),
            "admission restricted (hardened pod)": lambda i: evaluate(RESTRICTED, hardened[i]),
            "admission baseline (stripped pod)": lambda i: evaluate(BASELINE, plain[i]),
            "json encode (hardened)": lambda i: json.dumps(hardened[i]),
            "json encode (stripped)": lambda i: json.dumps(plain[i]),
        }
        for name, fn in timings.items():
            series.setdefault(name, []).append(_per_pod_us(fn, pods))
    medians = {name: round(statistics.median(v), 2) for name, v in series.items()}
    size_hardened = len(json.dumps(hardened[0], separators=(",", ":")))
    size_plain = len(json.dumps(plain[0], separators=(",", ":")))
    admission_us = medians["admission restricted (hardened pod)"]
    return {
        "pods": pods,
        "rounds": rounds,
        "per_pod_us": medians,
        "pod_bytes": {"hardened": size_hardened, "stripped": size_plain},
        "reference_burst": {
            "sandboxes": REFERENCE_BURST,
            "admission_cpu_s": round(admission_us * REFERENCE_BURST / 1e6, 3),
            "extra_bytes": (size_hardened - size_plain) * REFERENCE_BURST,
            "admission_share_of_write_budget": round(admission_us / 1e6 / WRITE_BUDGET_S, 4),
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m load.bench.admission", description=__doc__)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.pods, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
