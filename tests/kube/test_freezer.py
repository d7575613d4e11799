"""The controller's freezer (kube/freezer.py): after a full collection its survivors
are frozen, so the next full collection walks only what was promoted since, however many
long-lived objects there are; a cycle that died while frozen is reclaimed after a thaw."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kube.freezer import Freezer, FreezerSettings


@pytest.fixture
def freezing() -> Iterator[list[Freezer]]:
    """Freezers a test starts, stopped (everything unfrozen) whatever happens."""
    started: list[Freezer] = []
    try:
        yield started
    finally:
        for freezer in started:
            freezer.stop()


@pytest.mark.parametrize("long_lived", [2_000, 40_000])
def test_a_full_collection_leaves_the_oldest_generation_empty(
    freezing: list[Freezer], long_lived: int
) -> None:
    freezer = Freezer(FreezerSettings(thaw_floor=10**9))
    freezing.append(freezer)
    freezer.start()
    cached = [[i] for i in range(long_lived)]  # arrived after the sync: not frozen yet
    gc.collect()
    # What the next full collection walks: not the long-lived objects, whatever their number.
    assert len(gc.get_objects(generation=2)) < 100
    assert freezer.refreezes >= 1 and freezer.thaws == 0
    assert gc.get_freeze_count() >= long_lived
    del cached


class Cycle:
    me: Cycle | None = None


def test_a_cycle_that_died_frozen_is_reclaimed_after_a_thaw(freezing: list[Freezer]) -> None:
    freezer = Freezer(FreezerSettings(thaw_factor=1.05, thaw_floor=0))
    freezing.append(freezer)
    cycle = Cycle()
    cycle.me = cycle
    alive = weakref.ref(cycle)
    baseline = freezer.start()
    del cycle
    gc.collect()
    assert alive() is not None  # frozen: full collections do not walk it
    grown = [[i] for i in range(baseline // 10)]  # the frozen set grows past 1.05x
    gc.collect()  # freezes them, then thaws
    assert freezer.thaws == 1
    gc.collect()  # walks everything once
    assert alive() is None
    assert gc.get_freeze_count() >= len(grown)  # and froze the survivors again
    del grown


def test_stop_gives_everything_back(freezing: list[Freezer]) -> None:
    freezer = Freezer()
    freezing.append(freezer)
    freezer.start()
    assert gc.get_freeze_count() > 0
    freezer.stop()
    assert gc.get_freeze_count() == 0
    refreezes = freezer.refreezes
    gc.collect()
    assert freezer.refreezes == refreezes  # no longer called


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="thaw_factor"):
        FreezerSettings(thaw_factor=1.0)
