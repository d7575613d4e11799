"""What a fault run measured, reduced to the five figures of its report (pure, no I/O).

Why these definitions are written down here, in one module: "lost", "duplicated", "leaked"
and "failed with a typed reason" are the guarantees docs/guarantees.md states per fault;
the report, the tests and the page must mean the same thing by them. Each figure is counted
from two sides — the trainer's (what the SDK and the facade told it) and the API server's
(every sandbox pod the fault run's watch saw, and a final LIST) — because a guarantee that
holds on one side only is not one.

Definitions (one *requested sandbox* = one member of a create the trainer sent):

- **ready**: the trainer's ``wait_ready`` returned, and the final audit (a GET through the
  facade) still shows it ready or ended with a typed reason.
- **failed with a typed reason**: the trainer got a :class:`sandman.SandmanError` whose
  ``reason`` is a documented, machine-readable one (``node_lost``, ``owner_expired``,
  ``connection_failed``, ``rate_limited``...) — from the create, from ``wait_ready``, or, for
  a sandbox that was ready, from the final audit (the facade's state and reason). Code can
  branch on it. An exception that is not a ``SandmanError``, or one whose reason is empty or
  ``internal`` (an unexpected 500), is **untyped**.
- **lost**: the trainer holds a sandbox id (or sent a create) and cannot learn what became of
  it: its wait had not ended by the run's deadline, or the facade answers ``404
  sandbox_not_found`` for an id it handed out and the trainer never released, with no typed
  end reported first.
- **duplicated**: a sandbox pod the trainer did not ask for: a pod whose sandbox id the
  trainer was never given (a create repeated under a new key, a member created twice), or a
  second pod alive at the same time as another of the same sandbox id. A replacement pod
  (``<name>-r<N>``) started after its predecessor ended is not a duplicate.
- **leaked**: a sandbox pod that still exists on the API server after the trainer released
  everything it knew of (one release per owner), the dead trainer's owner lease lapsed, and
  the cleanup deadline passed (a LIST of the namespace, not the facade's cache).
- **time to detect**: seconds from the fault's injection to the moment the system showed it
  to the trainer or repaired it, per fault (FAULTS in ``load.faults.faults`` says which
  signal); over several affected sandboxes the report gives the median and the maximum.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sandman.sdk.errors import SandmanError

__all__ = [
    "UNTYPED_REASONS",
    "FaultFigures",
    "PodLife",
    "TrainerOutcome",
    "duplicated_pods",
    "figures",
    "is_typed",
    "percentile",
    "record_failure",
]

#: Reasons that say nothing a trainer can branch on.
UNTYPED_REASONS = frozenset({"", "internal"})


def is_typed(reason: str | None) -> bool:
    return reason is not None and reason not in UNTYPED_REASONS


def record_failure(m: TrainerOutcome, e: BaseException, at: float) -> None:
    """``m`` failed at ``at`` with ``e``: typed if a :class:`SandmanError` with a typed
    reason, else untyped under the exception's type name."""
    m.ended, m.outcome = at, "failed"
    if isinstance(e, SandmanError):
        m.reason, m.typed = e.reason, is_typed(e.reason)
    else:
        m.reason, m.typed = type(e).__name__, False


@dataclass(slots=True)
class TrainerOutcome:
    """One requested sandbox as the trainer saw it; times on the run's clock (s)."""

    key: str  # the create's idempotency key and the member's index
    sandbox_id: str = ""  # "" until (unless) a create answered with it
    requested: float | None = None
    ready: float | None = None
    ended: float | None = None  # when a failure or a typed end was reported
    outcome: str = "pending"  # pending | ready | failed | lost
    reason: str = ""  # the typed reason, or the exception's type for an untyped one
    typed: bool = True
    released: bool = False


@dataclass(frozen=True, slots=True)
class PodLife:
    """One pod as the API server side saw it (the watch), on the run's clock."""

    name: str
    sandbox_id: str
    seen: float
    deleted: float | None = None


def duplicated_pods(pods: Iterable[PodLife], known_ids: set[str]) -> list[PodLife]:
    """Pods of sandbox ids the trainer never got, and pods alive while another pod of the
    same id was (each overlapping pod after the first counts once)."""
    out: list[PodLife] = []
    by_id: dict[str, list[PodLife]] = {}
    for pod in pods:
        if pod.sandbox_id not in known_ids:
            out.append(pod)
        else:
            by_id.setdefault(pod.sandbox_id, []).append(pod)
    for lives in by_id.values():
        lives.sort(key=lambda p: p.seen)
        alive_until = -math.inf
        for pod in lives:
            if pod.seen < alive_until:
                out.append(pod)
            end = math.inf if pod.deleted is None else pod.deleted
            alive_until = max(alive_until, end)
    return out


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[k]


@dataclass(frozen=True, slots=True)
class FaultFigures:
    requested: int
    ready: int
    lost: int
    duplicated: int
    leaked: int
    failed_typed: int
    failed_untyped: int
    reasons: dict[str, int] = field(default_factory=dict)  # typed reason → sandboxes
    untyped: dict[str, int] = field(default_factory=dict)  # what the untyped ones were
    detect_p50_s: float = math.nan
    detect_max_s: float = math.nan
    detected: int = 0  # affected sandboxes (or events) whose detection was seen
    affected: int = 0  # sandboxes (or events) the fault hit
    ready_p50_s: float = math.nan  # requested → Ready, the trainer's clock
    ready_max_s: float = math.nan


def figures(
    outcomes: Iterable[TrainerOutcome],
    pods: Iterable[PodLife],
    leaked: int,
    detections: Mapping[str, float | None],
) -> FaultFigures:
    """The report's figures from the trainer's outcomes, the pods seen and the final LIST.

    ``detections``: affected item → seconds from injection to detection (None: never seen).
    """
    rows = list(outcomes)
    known = {o.sandbox_id for o in rows if o.sandbox_id}
    reasons: dict[str, int] = {}
    untyped: dict[str, int] = {}
    for o in rows:
        if o.outcome == "failed":
            bucket = reasons if o.typed else untyped
            bucket[o.reason] = bucket.get(o.reason, 0) + 1
    seen = [t for t in detections.values() if t is not None]
    waits = [o.ready - o.requested for o in rows if o.ready is not None and o.requested is not None]
    return FaultFigures(
        requested=len(rows),
        ready=sum(1 for o in rows if o.outcome == "ready"),
        lost=sum(1 for o in rows if o.outcome in ("lost", "pending")),
        duplicated=len(duplicated_pods(pods, known)),
        leaked=leaked,
        failed_typed=sum(reasons.values()),
        failed_untyped=sum(untyped.values()),
        reasons=reasons,
        untyped=untyped,
        detect_p50_s=percentile(seen, 50),
        detect_max_s=max(seen, default=math.nan),
        detected=len(seen),
        affected=len(detections),
        ready_p50_s=percentile(waits, 50),
        ready_max_s=max(waits, default=math.nan),
    )
