"""Run a module with Python's cyclic GC under observation: ``python -m load.bench.gc_probe
OUT -m controller ARGS...``.

Why a wrapper and not a metric: the question (does the cyclic collector's cost grow with the
number of cached objects?) is a benchmark's, asked of one run; the controller itself need
not time its collections. ``gc.callbacks`` sees every collection of every generation with
the number of objects it found; the wrapper sums collections and seconds per generation and,
on each SIGUSR1, appends one JSON line to ``OUT`` with the totals so far, the generation
counts and the frozen objects. The benchmark sends SIGUSR1 at its window's start and end
and reports the difference (load/bench/controller_burst.py, ``--gc-stats``).
"""

from __future__ import annotations

import gc
import json
import runpy
import signal
import sys
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

__all__ = ["GCProbe", "main"]


@dataclass
class GCProbe:
    """Collections and seconds per generation, from ``gc.callbacks``."""

    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    seconds: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    collected: list[int] = field(default_factory=lambda: [0, 0, 0])
    _started: float = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self.collections[generation] += 1
        self.seconds[generation] += time.perf_counter() - self._started
        self.collected[generation] += info.get("collected", 0)

    def snapshot(self) -> dict[str, Any]:
        return {
            "at": time.time(),
            "collections": list(self.collections),
            "seconds": [round(s, 4) for s in self.seconds],
            "collected": list(self.collected),
            "counts": list(gc.get_count()),
            "thresholds": list(gc.get_threshold()),
            "frozen": gc.get_freeze_count(),
        }


def main() -> None:
    out, dash_m, module, *args = sys.argv[1:]
    if dash_m != "-m":
        raise SystemExit("usage: python -m load.bench.gc_probe OUT -m MODULE [ARGS...]")
    probe = GCProbe()
    gc.callbacks.append(probe)

    def dump(_signum: int, _frame: FrameType | None) -> None:
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps(probe.snapshot()) + "\n")

    signal.signal(signal.SIGUSR1, dump)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
