"""Quantities parse like Kubernetes' resource.Quantity, rounding up to integer units."""

from __future__ import annotations

from fractions import Fraction

import pytest

from scheduler import QuantityParser, parse_quantity


# The shared table, tests/support/quantities.py (run by tests/test_quantity_table.py against
# this parser and simcluster's), holds the other cases that used to be listed here.
@pytest.mark.parametrize(
    ("text", "millis", "units"),
    [
        ("100m", 100, 1),
        ("+5", 5000, 5),
        (3, 3000, 3),
    ],
)
def test_quantity_table(text: str | int, millis: int, units: int) -> None:
    parser = QuantityParser()
    assert parser.millis(text) == millis
    assert parser.units(text) == units
    # A second lookup comes from the memo and must agree.
    assert parser.millis(text) == millis


def test_exact_fraction() -> None:
    assert parse_quantity("1.5Gi") == Fraction(3 * 2**29)
    assert parse_quantity("250m") == Fraction(1, 4)


def test_memo_is_bounded() -> None:
    parser = QuantityParser(cache_limit=8)
    for i in range(100):
        assert parser.units(f"{i}Ki") == i * 1024
    assert len(parser._units) <= 8
