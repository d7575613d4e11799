"""Kubernetes resource quantities ("250m", "512Mi", "1e3", "1.5Gi") parsed exactly.

Why exact: capacity arithmetic must agree with the kubelet's admission check, or the planner
would place a pod the node then rejects (OutOfcpu). Kubernetes parses quantities as decimal
numbers with a binary (Ki, Mi, ...) or decimal (m, k, M, ...) suffix or a decimal exponent,
and rounds *up* (away from zero) when converting to an integer unit (``MilliValue()`` for CPU,
``Value()`` for bytes). We do the same in integer arithmetic, so "0.1m" is 1 millicore and
"1.5Gi" is exactly 1610612736 bytes.

What counts as a quantity is upstream's ``ParseQuantity`` applied to a JSON value the way
``Quantity.UnmarshalJSON`` does it; tests/support/quantities.py is the table of cases, run
against this parser and simcluster's. In short:

- a string, trimmed of the spaces Go's ``strings.TrimSpace`` trims that JSON can carry
  unescaped (a tab or newline in a decoded string was an escape, which upstream never decodes
  and so rejects), then ``[+-]digits[.digits]`` with a suffix (n u m k M G T P E, Ki ... Ei)
  or an exponent (``e``/``E``, a signed int64). Digits are ASCII only: ``str.isdigit`` and
  ``\\d`` accept '٣' or '²', upstream does not;
- a JSON number: an ``int`` exactly; a ``float`` as the shortest decimal that round-trips
  (what the JSON said, whenever it fitted a double), so 0.1 is 100 millis, not 101;
- ``null`` is the zero quantity; ``true``/``false`` (Python's ``True`` is an ``int``!),
  arrays and objects are not quantities.

Huge and tiny values answer in time bounded by the length of the text, never by its exponent:
"1e999999999" saturates and "1e-999999999" is one nano. Results are exact wherever upstream's
int64 accessors are; where those overflow (their result is undefined) we saturate at the
int64 bounds. Negative quantities parse (whether a request may be negative is validation).

Parsing is the hot part of handling a pod event, so :class:`QuantityParser` memoises the few
distinct strings a cluster actually uses (bounded, per instance: no module-level cache).
"""

from __future__ import annotations

import re
from fractions import Fraction
from types import MappingProxyType

__all__ = ["QuantityError", "QuantityParser", "parse_quantity"]

_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
_NANO = 10**9
#: suffix -> (power of ten, power of two)
_SUFFIX = MappingProxyType(
    {
        "n": (-9, 0),
        "u": (-6, 0),
        "m": (-3, 0),
        "": (0, 0),
        "k": (3, 0),
        "M": (6, 0),
        "G": (9, 0),
        "T": (12, 0),
        "P": (15, 0),
        "E": (18, 0),
        "Ki": (0, 10),
        "Mi": (0, 20),
        "Gi": (0, 30),
        "Ti": (0, 40),
        "Pi": (0, 50),
        "Ei": (0, 60),
    }
)
# [0-9], not \d: only ASCII digits are digits. The exponent is tried before the "E" suffix.
_PATTERN = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:[eE](?P<exp>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)
#: Go's unicode.IsSpace minus the ASCII controls, which JSON strings cannot carry unescaped.
#: (Python's str.strip() would also trim "\x1c".."\x1f", which Go keeps.)
_SPACE = (
    " \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
#: Larger than any bound we clamp to (int64 nano-units are < 10**28).
_HUGE = 10**30


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def _reject(value: object) -> QuantityError:
    try:
        shown = repr(value)
    except ValueError:  # e.g. a list holding an int past Python's int-to-str digit limit
        shown = f"<{type(value).__name__}>"
    if len(shown) > 80:
        shown = shown[:60] + "..." + shown[-17:]
    return QuantityError(f"not a quantity: {shown}")


def _ceil(digits: str, power: int, shift: int) -> int:
    """``ceil(int(digits) * 2**shift * 10**power)``, for digits without leading zeros.

    Bounded work whatever ``power`` is: ``_HUGE`` stands for anything at least 10**30, and a
    value below one is one. ``2**shift`` is at most 2**60 < 10**19.
    """
    n = len(digits)
    if n - 1 + power >= 30:
        return _HUGE
    if n + power + 19 <= 0:
        return 1
    if power >= 0:
        return (int(digits) << shift) * 10**power
    if n <= 100:
        quotient, remainder = divmod(int(digits) << shift, 10 ** (-power))
        return quotient + (remainder != 0)
    # A long mantissa (n > 100, so -power > 70 > shift): x = N * 2**shift / 10**-power
    # = (head + tail / 10**s) / 5**shift with s = -power - shift, so only the leading digits
    # (head) need converting; the tail only tells whether anything is left over.
    s = -power - shift
    cut = n - s
    head = int(digits[:cut]) if cut > 0 else 0
    whole, part = divmod(head, 5**shift)
    return whole + (part != 0 or digits.count("0", max(cut, 0)) != n - max(cut, 0))


def _exponent(text: str, value: object) -> int:
    """A decimal exponent, which upstream reads as an int64 (out of range: rejected)."""
    sign = "-" if text[0] == "-" else ""
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > 19:
        raise _reject(value)
    exponent = int(sign + (digits or "0"))
    if not _INT64_MIN <= exponent <= _INT64_MAX:
        raise _reject(value)
    return exponent


def _scaled(value: object, scale: int, low: int, high: int) -> int:
    """The quantity times 10**scale, rounded away from zero, clamped to [low, high]."""
    if isinstance(value, str):
        text = value.strip(_SPACE)
    elif isinstance(value, bool):  # before int: True is an int, and not a quantity
        raise _reject(value)
    elif isinstance(value, int):
        return max(low, min(high, int(value) * 10**scale))
    elif isinstance(value, float):
        text = repr(value)  # "inf" and "nan" do not match below
    elif value is None:  # JSON null decodes to the zero Quantity
        return 0
    else:
        raise _reject(value)
    match = _PATTERN.fullmatch(text)
    if match is None:
        raise _reject(value)
    sign, whole, frac, exp, suffix = match.groups()
    frac = frac or ""
    if not whole and not frac:  # the grammar wants a digit (upstream's scanner reads some as 0)
        raise _reject(value)
    if exp is None:
        power, shift = _SUFFIX[suffix or ""]
    else:
        power, shift = _exponent(exp, value), 0
    digits = (whole + frac).lstrip("0")
    if not digits:
        return 0
    magnitude = _ceil(digits, power + scale - len(frac), shift)
    if shift:  # upstream caps a binary-suffixed value at 2**63-1 (a decimal one it does not)
        magnitude = min(magnitude, _INT64_MAX * 10**scale)
    return max(low, -magnitude) if sign == "-" else min(high, magnitude)


def parse_quantity(text: object) -> Fraction:
    """A quantity as an exact number of base units (cores, bytes, ...), or :class:`QuantityError`.

    The value upstream holds: rounded away from zero to a whole nano-unit, a binary-suffixed
    one capped at 2**63-1 in magnitude; beyond the int64 range (where upstream's accessors
    overflow) saturated at its bounds.
    """
    return Fraction(_scaled(text, 9, _INT64_MIN * _NANO, _INT64_MAX * _NANO), _NANO)


class QuantityParser:
    """Memoising converter from quantities to integer units, rounding up like Kubernetes."""

    __slots__ = ("_limit", "_millis", "_units")

    def __init__(self, cache_limit: int = 4096) -> None:
        self._limit = cache_limit
        # Only str keys are stored: True == 1 == 1.0 hash alike, so a number key would answer
        # for a boolean, which is no quantity. Numbers parse fast enough without a memo.
        self._millis: dict[object, int] = {}
        self._units: dict[object, int] = {}

    def millis(self, text: object) -> int:
        """Value in thousandths, rounded up (Kubernetes ``MilliValue()``): CPU in millicores."""
        try:
            hit = self._millis.get(text)
        except TypeError:  # unhashable: a JSON array or object
            raise _reject(text) from None
        if hit is None:
            hit = _scaled(text, 3, _INT64_MIN, _INT64_MAX)
            if type(text) is str:
                self._remember(self._millis, text, hit)
        return hit

    def units(self, text: object) -> int:
        """Value in base units, rounded up (Kubernetes ``Value()``): bytes, pods, devices."""
        try:
            hit = self._units.get(text)
        except TypeError:
            raise _reject(text) from None
        if hit is None:
            hit = _scaled(text, 0, _INT64_MIN, _INT64_MAX)
            if type(text) is str:
                self._remember(self._units, text, hit)
        return hit

    def _remember(self, cache: dict[object, int], key: str, v: int) -> None:
        if len(cache) >= self._limit:
            cache.clear()
        cache[key] = v
