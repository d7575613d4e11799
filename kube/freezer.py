"""Keeping the cyclic garbage collector's full collections proportional to what changed.

Why: a process with watch caches — the controller (every pod and node), the facade (every
sandbox pod of its tenants) — holds them as decoded JSON (dicts and lists, tracked by
CPython's cyclic collector), and a burst replaces them at a high rate (each watch event is a
new object tree; the one it replaces dies by reference counting). CPython 3.11 starts a full
collection when the objects promoted into the oldest generation since the last one exceed a
quarter of those that survived it, and the short-lived trees of a burst are promoted in
numbers; so full collections come at a pace set by the event rate, each walking every live
cached object. That is O(pods) per bind: measured at 0.079 s per 1,000 binds at 12,000
sandboxes, 0.136 s at 50,000 (docs/benchmarks/controller.md,
"Scale beyond the reference"); in the facade, whose every create allocates a request's
worth of short-lived objects, full collections took ~1 s of the ~6 s of CPU that 4,200
creates cost it (gc.callbacks, 2026-12-02).

How: once the caches are synced, collect and ``gc.freeze()`` (the permanent generation,
which collections never walk), as before; then after every full collection freeze its
survivors as well (a list splice, O(1)), so the next full collection walks only what was
promoted since. What is frozen is never examined, so a reference cycle among frozen objects
that dies later is not reclaimed while frozen (acyclic garbage is: reference counting frees
it). To bound that, when the frozen count has grown ``thaw_factor`` times over its size after
the last thaw, everything is unfrozen: the next full collection walks it all once, reclaims
such cycles, and its survivors are frozen again. A thaw costs O(live objects) and comes only
after the frozen set has grown by that factor, so it is amortised O(1) per object.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from typing import Any

from sandman.base.settings import setting

__all__ = ["Freezer", "FreezerSettings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FreezerSettings:
    thaw_factor: float = setting(
        2.0,
        help="unfreeze (for one full collection) once the frozen objects are this many times "
        "as many as after the last thaw: bounds the cycles that died while frozen",
        dimensionless=True,
    )
    thaw_floor: int = setting(
        200_000,
        help="...but not before there are this many (a small controller thaws rarely, not often)",
    )

    def __post_init__(self) -> None:
        if self.thaw_factor <= 1:
            raise ValueError("thaw_factor must be > 1")


class Freezer:
    """Call :meth:`start` once the caches are synced and :meth:`stop` at shutdown."""

    def __init__(self, settings: FreezerSettings | None = None) -> None:
        self.settings = settings or FreezerSettings()
        self._baseline = 0  # frozen objects after the last thaw's full collection
        self._thawed = False
        self._running = False
        #: For tests and logs: full collections whose survivors were frozen, and thaws.
        self.refreezes = 0
        self.thaws = 0

    def start(self) -> int:
        """Collect, freeze what is alive and keep freezing survivors; the frozen count."""
        gc.collect()  # what is garbage now should not be kept forever
        gc.freeze()
        self._baseline = gc.get_freeze_count()
        if not self._running:
            gc.callbacks.append(self._collected)
            self._running = True
        return self._baseline

    def stop(self) -> None:
        """Stop freezing and give everything back to the collector."""
        if self._running:
            gc.callbacks.remove(self._collected)
            self._running = False
            gc.unfreeze()

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks``: after a full collection, freeze its survivors (or thaw)."""
        if phase != "stop" or info.get("generation") != 2:
            return
        gc.freeze()
        self.refreezes += 1
        frozen = gc.get_freeze_count()
        if self._thawed:  # this collection walked everything: the new baseline
            self._thawed = False
            self._baseline = frozen
            return
        s = self.settings
        if frozen > max(s.thaw_floor, s.thaw_factor * self._baseline):
            gc.unfreeze()  # the next full collection walks (and reclaims) everything once
            self._thawed = True
            self.thaws += 1
            log.debug("thawing %d frozen objects (%d after the last thaw)", frozen, self._baseline)
