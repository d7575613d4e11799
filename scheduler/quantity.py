"""Kubernetes resource quantities ("250m", "512Mi", "1e3", "1.5Gi") parsed exactly.

Why exact: capacity arithmetic must agree with the kubelet's admission check, or the planner
would place a pod the node then rejects (OutOfcpu). Kubernetes parses quantities as decimal
numbers with a binary (Ki, Mi, ...) or decimal (m, k, M, ...) suffix or a decimal exponent,
and rounds *up* when converting to an integer unit (``MilliValue()`` for CPU, ``Value()`` for
bytes). We do the same with :class:`fractions.Fraction`, so "0.1m" is 1 millicore and
"1.5Gi" is exactly 1610612736 bytes.

Parsing is the hot part of handling a pod event, so :class:`QuantityParser` memoises the few
distinct strings a cluster actually uses (bounded, per instance: no module-level cache).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from types import MappingProxyType

__all__ = ["QuantityError", "QuantityParser", "parse_quantity"]

_BINARY = MappingProxyType(
    {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
)
_DECIMAL = MappingProxyType(
    {
        "n": Fraction(1, 10**9),
        "u": Fraction(1, 10**6),
        "m": Fraction(1, 10**3),
        "": Fraction(1),
        "k": Fraction(10**3),
        "M": Fraction(10**6),
        "G": Fraction(10**9),
        "T": Fraction(10**12),
        "P": Fraction(10**15),
        "E": Fraction(10**18),
    }
)
_PATTERN = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a quantity into an exact rational number of base units (cores, bytes, ...)."""
    if isinstance(text, bool):
        raise QuantityError(f"not a quantity: {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"not a quantity: {text!r}")
        return Fraction(text)
    match = _PATTERN.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise QuantityError(f"not a quantity: {text!r}")
    number = Fraction(match["num"])
    if match["exp"]:
        return number * Fraction(10) ** int(match["exp"][1:])
    suffix = match["suffix"] or ""
    return number * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


class QuantityParser:
    """Memoising converter from quantity strings to integer units, rounding up like Kubernetes."""

    __slots__ = ("_limit", "_millis", "_units")

    def __init__(self, cache_limit: int = 4096) -> None:
        self._limit = cache_limit
        self._millis: dict[str | int | float, int] = {}
        self._units: dict[str | int | float, int] = {}

    def millis(self, text: str | int | float) -> int:
        """Value in thousandths, rounded up (Kubernetes ``MilliValue()``): CPU in millicores."""
        hit = self._millis.get(text)
        if hit is None:
            hit = math.ceil(parse_quantity(text) * 1000)
            self._remember(self._millis, text, hit)
        return hit

    def units(self, text: str | int | float) -> int:
        """Value in base units, rounded up (Kubernetes ``Value()``): bytes, pods, devices."""
        hit = self._units.get(text)
        if hit is None:
            hit = math.ceil(parse_quantity(text))
            self._remember(self._units, text, hit)
        return hit

    def _remember(
        self, cache: dict[str | int | float, int], key: str | int | float, v: int
    ) -> None:
        if len(cache) >= self._limit:
            cache.clear()
        cache[key] = v
