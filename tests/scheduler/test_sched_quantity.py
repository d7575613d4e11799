"""Quantities parse like Kubernetes' resource.Quantity, rounding up to integer units."""

from __future__ import annotations

from fractions import Fraction

import pytest

from scheduler import QuantityError, QuantityParser, parse_quantity


@pytest.mark.parametrize(
    ("text", "millis", "units"),
    [
        ("250m", 250, 1),
        ("1", 1000, 1),
        ("16", 16000, 16),
        ("0.5", 500, 1),
        ("1.5", 1500, 2),
        ("100m", 100, 1),
        ("0.1m", 1, 1),  # rounds up, like MilliValue()
        ("1e3", 1_000_000, 1000),
        ("1E-3", 1, 1),
        ("2k", 2_000_000, 2000),
        ("512Mi", 512 * 2**20 * 1000, 512 * 2**20),
        ("1Gi", 2**30 * 1000, 2**30),
        ("1.5Gi", 3 * 2**29 * 1000, 3 * 2**29),
        ("64Gi", 64 * 2**30 * 1000, 64 * 2**30),
        ("1M", 10**9, 10**6),
        ("110", 110_000, 110),
        ("+5", 5000, 5),
        (".5Ki", 512_000, 512),
        ("0", 0, 0),
        ("1n", 1, 1),
        (3, 3000, 3),
    ],
)
def test_quantity_table(text: str | int, millis: int, units: int) -> None:
    parser = QuantityParser()
    assert parser.millis(text) == millis
    assert parser.units(text) == units
    # A second lookup comes from the memo and must agree.
    assert parser.millis(text) == millis


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "5Mb", "m", "1 Gi", "Gi", "1e", "--1"])
def test_invalid_quantities_raise_a_clear_error(text: str) -> None:
    with pytest.raises(QuantityError, match="not a quantity"):
        parse_quantity(text)


def test_exact_fraction() -> None:
    assert parse_quantity("1.5Gi") == Fraction(3 * 2**29)
    assert parse_quantity("250m") == Fraction(1, 4)


def test_memo_is_bounded() -> None:
    parser = QuantityParser(cache_limit=8)
    for i in range(100):
        assert parser.units(f"{i}Ki") == i * 1024
    assert len(parser._units) <= 8
