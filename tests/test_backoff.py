"""The one backoff helper (sandman.base.backoff): its invariants, for any input.

Every retry loop in Sandman computes its delays with :class:`Backoff`, so these properties
hold for all of them: a delay is never negative or NaN, never shorter than the server's
Retry-After (clamped to ``max_retry_after_s``), never longer than the ceiling or the spread
floor, and the ceilings never decrease. tests/test_retry_loops.py shows each loop using it.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandman.base.backoff import Backoff

positive = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False)
backoffs = st.builds(
    Backoff,
    initial_s=positive,
    multiplier=st.floats(min_value=1.0, max_value=100.0),
    cap_s=positive,
    jitter=st.sampled_from(["full", "equal"]),
    max_retry_after_s=st.floats(min_value=0.0, max_value=1e6),
    retry_after_spread=st.floats(min_value=0.0, max_value=10.0),
)
attempts = st.integers(min_value=-10, max_value=10**12)
#: What a server (or a parser) may hand over: nothing, nonsense, huge, or a real hint.
retry_afters = st.none() | st.floats(allow_nan=True, allow_infinity=True)
#: Generators that stay in [0, 1) and ones that do not (a broken source must not leak through).
unit_draws = st.lists(
    st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
    | st.sampled_from([0.0, 1.0, -1.0, 2.0, math.nan, math.inf]),
    min_size=2,
    max_size=2,
)


class Scripted:
    """A random source that returns the given draws in turn."""

    def __init__(self, draws: list[float]) -> None:
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


@given(backoffs, attempts, retry_afters, unit_draws)
def test_delay_lies_between_the_floor_and_the_larger_of_ceiling_and_spread_floor(
    b: Backoff, attempt: int, retry_after: float | None, draws: list[float]
) -> None:
    delay = b.delay(attempt, retry_after, Scripted(draws))
    floor = b.floor(retry_after)
    upper = max(b.ceiling(attempt), floor * (1 + b.retry_after_spread))
    assert not math.isnan(delay) and delay >= 0
    assert floor <= delay <= upper
    assert 0 <= floor <= b.max_retry_after_s
    if b.jitter == "equal":
        assert delay >= b.ceiling(attempt) / 2


@given(backoffs, attempts, st.floats(min_value=0.0, max_value=1e6), st.integers(0, 2**32))
def test_retry_after_is_honoured_up_to_its_cap(
    b: Backoff, attempt: int, retry_after: float, seed: int
) -> None:
    delay = b.delay(attempt, retry_after, random.Random(seed))
    assert delay >= min(retry_after, b.max_retry_after_s)
    assert b.honours(retry_after) == (retry_after <= b.max_retry_after_s)


@given(backoffs, st.integers(min_value=-10, max_value=10**6))
def test_ceilings_never_decrease_and_never_pass_the_cap(b: Backoff, attempt: int) -> None:
    ceiling, following = b.ceiling(attempt), b.ceiling(attempt + 1)
    assert 0 < ceiling <= following <= b.cap_s
    assert b.ceiling(1) == min(b.initial_s, b.cap_s)


@given(backoffs, st.integers(min_value=1, max_value=60))
def test_ceilings_grow_by_the_multiplier_until_the_cap(b: Backoff, attempt: int) -> None:
    expected = min(b.cap_s, b.initial_s * b.multiplier ** (attempt - 1))
    assert b.ceiling(attempt) == pytest.approx(expected, rel=1e-9)


def test_full_jitter_spreads_over_the_whole_step_and_equal_over_its_upper_half() -> None:
    rng = random.Random(1)
    full = [Backoff(1.0, jitter="full").delay(1, None, rng) for _ in range(2000)]
    equal = [Backoff(1.0, jitter="equal").delay(1, None, rng) for _ in range(2000)]
    assert min(full) < 0.05 and max(full) > 0.95
    assert min(equal) >= 0.5 and max(equal) > 0.95


def test_a_retry_after_floor_is_spread_upwards_not_all_at_once() -> None:
    b = Backoff(0.01, cap_s=0.05)
    rng = random.Random(2)
    delays = [b.delay(1, 1.0, rng) for _ in range(1000)]
    assert min(delays) >= 1.0 and max(delays) <= 1.2
    assert max(delays) - min(delays) > 0.15  # the throttled herd comes back spread out
    assert Backoff(0.01, retry_after_spread=0).delay(1, 1.0, rng) == 1.0


@pytest.mark.parametrize(
    "fields",
    [
        {"initial_s": 0.0},
        {"initial_s": -1.0},
        {"initial_s": math.nan},
        {"initial_s": 1.0, "cap_s": 0.0},
        {"initial_s": 1.0, "cap_s": math.inf},
        {"initial_s": 1.0, "multiplier": 0.5},
        {"initial_s": 1.0, "max_retry_after_s": -1.0},
        {"initial_s": 1.0, "retry_after_spread": math.nan},
        {"initial_s": 1.0, "jitter": "none"},
    ],
)
def test_settings_that_would_hot_loop_or_poison_the_delays_are_refused(
    fields: dict[str, object],
) -> None:
    with pytest.raises(ValueError, match=r"backoff|jitter"):
        Backoff(**fields)  # type: ignore[arg-type]
