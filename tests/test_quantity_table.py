"""Every row of tests/support/quantities.py, against the scheduler's and simcluster's parsers.

The two parsers are separate on purpose (simcluster imports no other Sandman component, so
the simulator cannot inherit a bug of the code it checks); this is where they are held to
one answer, upstream's. The properties below go past the table: generated well-formed
quantities get identical values from both (and from a plain Fraction reference), generated
arbitrary JSON scalars and text get the same accept/reject verdict.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

import simcluster.quantity as sim
from scheduler import QuantityError, QuantityParser, parse_quantity
from simcluster.errors import BadRequest
from tests.support.quantities import CASES, MAX, MIN, REJECTED, Case

#: Generous: every row, however long or large, is a matter of microseconds to milliseconds.
ROW_BUDGET_S = 1.0

Answer = tuple[int, int, Fraction] | str


def _show(value: object) -> str:
    if isinstance(value, int) and abs(value) > 10**30:
        return f"int of {value.bit_length()} bits"
    shown = repr(value)
    return shown if len(shown) <= 40 else f"{shown[:30]}...({len(shown)} chars)"


def _away(x: Fraction) -> int:
    """Rounded up, away from zero, like upstream's MilliValue()/Value()."""
    return math.ceil(x) if x >= 0 else -math.ceil(-x)


def _clamp(v: int) -> int:
    return max(MIN, min(MAX, v))


def scheduler_answer(value: object, parser: QuantityParser | None = None) -> Answer:
    parser = parser or QuantityParser()
    try:
        millis, units = parser.millis(value), parser.units(value)
    except QuantityError:
        with pytest.raises(QuantityError, match="not a quantity"):
            parse_quantity(value)
        with pytest.raises(QuantityError):  # the memo must not have kept anything
            parser.millis(value)
        return REJECTED
    # A second lookup comes from the memo (for a string) and must agree.
    assert (parser.millis(value), parser.units(value)) == (millis, units)
    return millis, units, parse_quantity(value)


def simcluster_answer(value: object) -> Answer:
    try:
        millis, units = sim.to_milli(value), sim.to_units(value)
    except BadRequest as e:
        status = e.to_status()
    else:
        return millis, units, sim.parse_quantity(value)
    # What the simulated API server answers: 400 BadRequest, as a real one does when a body's
    # quantity does not decode.
    assert (status["code"], status["reason"]) == (400, "BadRequest")
    with pytest.raises(BadRequest):
        sim.parse_quantity(value)
    return REJECTED


def _expected(answer: Answer) -> tuple[int, int] | str:
    if isinstance(answer, str):
        return answer
    millis, units, exact = answer
    # parse_quantity is the value both conversions are read from.
    assert 10**9 % exact.denominator == 0
    assert (_clamp(_away(exact * 1000)), _clamp(_away(exact))) == (millis, units)
    return millis, units


@pytest.mark.parametrize("case", CASES, ids=[_show(c.value) for c in CASES])
@pytest.mark.parametrize(
    "answer", [scheduler_answer, simcluster_answer], ids=["scheduler", "simcluster"]
)
def test_table(case: Case, answer: Callable[[object], Answer]) -> None:
    start = time.perf_counter()
    got = answer(case.value)
    assert time.perf_counter() - start < ROW_BUDGET_S
    assert _expected(got) == case.expect


def test_the_parsers_hold_the_same_exact_values() -> None:
    for case in CASES:
        assert scheduler_answer(case.value) == simcluster_answer(case.value), case


def test_the_table_covers_what_it_claims() -> None:
    kinds = {type(c.value) for c in CASES}
    assert {str, int, float, bool, type(None), list, dict} <= kinds
    assert len(CASES) >= 60
    assert len({(type(c.value), _show(c.value)) for c in CASES}) == len(CASES), "duplicate rows"


def test_one_memo_across_the_whole_table() -> None:
    """Rows share a parser the way pods share one: earlier rows must not answer later ones."""
    parser = QuantityParser()
    for _ in range(2):
        for case in CASES:
            assert _expected(scheduler_answer(case.value, parser)) == case.expect, case


def test_a_boolean_is_not_answered_from_the_memo() -> None:
    parser = QuantityParser()
    assert parser.millis("1") == parser.millis(1) == parser.millis(1.0) == 1000
    assert parser.units("0") == parser.units(0) == 0
    for value in (True, False):
        with pytest.raises(QuantityError):
            parser.millis(value)
        with pytest.raises(QuantityError):
            parser.units(value)


# --- properties ----------------------------------------------------------------------------

_SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_ascii_digits = st.text(alphabet="0123456789", max_size=24)


@st.composite
def well_formed(draw: st.DrawFn) -> str:
    """An ASCII quantity with at least one digit: sign, digits, fraction, suffix or exponent."""
    whole = draw(_ascii_digits)
    frac = draw(st.none() | _ascii_digits)
    if not whole and not frac:
        whole = draw(st.text(alphabet="0123456789", min_size=1, max_size=3))
    number = whole if frac is None else f"{whole}.{frac}"
    tail = draw(
        st.sampled_from(_SUFFIXES)
        | st.builds(
            "{}{}{}".format,
            st.sampled_from("eE"),
            st.sampled_from(["", "+", "-"]),
            st.integers(0, 45).map(str),
        )
    )
    return draw(st.sampled_from(["", "+", "-"])) + number + tail


def _reference(text: str) -> tuple[int, int]:
    """Upstream's answer, the slow obvious way (Fraction; moderate exponents only)."""
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    shift, power = 0, 0
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and body.endswith(suffix) and not body[: -len(suffix)].endswith(("e", "E")):
            body = body[: -len(suffix)]
            shift, power = _BINARY.get(suffix, 0), _DECIMAL.get(suffix, 0)
            break
    else:
        if "e" in body.lower():
            body, exp = body.lower().split("e")
            power = int(exp)
    whole, _, frac = body.partition(".")
    q = Fraction(int(whole + frac or "0"), 10 ** len(frac)) * Fraction(10) ** power * 2**shift
    q = Fraction(_away(q * 10**9), 10**9)  # parsing keeps nano-units
    if shift:
        q = min(q, Fraction(MAX))  # and caps a binary-suffixed magnitude
    return _clamp(_away(sign * q * 1000)), _clamp(_away(sign * q))


@given(well_formed())
def test_well_formed_quantities_get_one_exact_answer(text: str) -> None:
    expected = _reference(text)
    sched, simc = scheduler_answer(text), simcluster_answer(text)
    assert sched == simc
    assert _expected(sched) == expected


_quantity_ish = st.text(
    alphabet="0123456789.+-eEinumkKMGTP iB_x\t\n\x1f\xa0\u3000\u200b\u0663\u00b2\uff11",
    max_size=12,
)
json_scalars = (
    _quantity_ish
    | well_formed()
    | st.text(max_size=12)
    | st.integers()
    | st.floats()
    | st.booleans()
    | st.none()
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=2), st.integers(), max_size=1)
)


@given(json_scalars)
def test_both_parsers_agree_on_what_is_a_quantity(value: object) -> None:
    sched, simc = scheduler_answer(value), simcluster_answer(value)
    assert (sched == REJECTED) == (simc == REJECTED)
    assert sched == simc
