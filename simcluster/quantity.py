"""Kubernetes resource quantities ("250m", "512Mi", "1.5", "2e3") as exact integers.

Admission (kubelet) and quota checks compare sums of quantities; doing that on floats would
make "0.1 + 0.2 CPU" disagree with the real server, so CPU is kept in millicores and
everything else in whole units (bytes, pods), both rounded up (away from zero) as upstream's
``MilliValue()``/``Value()`` do.

What is a quantity follows upstream's ``ParseQuantity`` fed the way ``Quantity.UnmarshalJSON``
feeds it a JSON value (tests/support/quantities.py holds the cases):

- a string: trimmed of the spaces Go's ``strings.TrimSpace`` trims that a JSON string can hold
  unescaped (a decoded tab or newline was an escape, which upstream sees as a backslash), then
  a sign, ASCII digits (never Python's Unicode ``isdigit``), a fraction, and a suffix
  (n u m k M G T P E, Ki ... Ei) or a decimal exponent that fits an int64;
- a JSON number: an int exactly, a float as its shortest round-tripping decimal (the JSON
  text, whenever it fitted a double: 0.1 is 100m, not 101m);
- null: the zero quantity. Booleans (a Python bool is an int!), arrays and objects: 400.

The value is what upstream stores (rounded away from zero to a nano-unit; a binary-suffixed
one capped at 2**63-1), saturated at the int64 bounds where upstream's int64 accessors would
overflow. Work is bounded by the length of the text, not its exponent ("1e999999999").

The scheduler has a parser of its own (scheduler/quantity.py) on purpose: simcluster imports
no other Sandman component (an import-linter contract), so a parsing bug in the code under
test cannot be mirrored by the simulator that checks it.
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_UP, Context, Decimal
from fractions import Fraction

from simcluster.errors import BadRequest

__all__ = ["format_cpu", "format_memory", "parse_quantity", "to_milli", "to_units"]

_MAX = 2**63 - 1
_MIN = -(2**63)
#: suffix -> (decimal exponent, binary exponent)
_SUFFIX = {
    "": (0, 0),
    "n": (-9, 0),
    "u": (-6, 0),
    "m": (-3, 0),
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
_RUN = re.compile("[0-9]*")  # ASCII digits only: not \d, not str.isdigit
#: What JSON can carry unescaped of what Go's unicode.IsSpace calls a space.
_BLANKS = "".join(map(chr, (0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B))))
_BLANKS += "".join(map(chr, (0x2028, 0x2029, 0x202F, 0x205F, 0x3000)))
_GRAMMAR = r"^[+-]?[0-9]*(\.[0-9]*)?([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
_NANO = Decimal("1e-9")
_ZERO = Decimal(0)
_THOUSAND = Decimal(1000)
_BEYOND = Decimal(2**64)
#: Exact for a mantissa of up to 40 digits (times 2**60, at nano precision).
_EXACT = Context(prec=100, Emax=MAX_EMAX, Emin=MIN_EMIN)
#: Enough digits for any clamped value (|q| <= 2**63 at nano precision) times 1000.
_SMALL = Context(prec=40, rounding=ROUND_UP)


def _bad(value: object) -> BadRequest:
    try:
        shown = repr(value)
    except ValueError:  # e.g. a list holding an int past Python's int-to-str digit limit
        shown = f"<{type(value).__name__}>"
    if len(shown) > 80:
        shown = f"{shown[:60]}...{shown[-17:]}"
    return BadRequest(f"quantities must match the regular expression {_GRAMMAR!r}: {shown}")


def _digit_run(text: str, i: int) -> int:
    """Where the run of ASCII digits starting at ``i`` ends."""
    run = _RUN.match(text, i)
    return run.end() if run else i


def _exponent(text: str) -> int | None:
    """The int64 after an "e"/"E", or None: optional sign, then at least one ASCII digit."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or _digit_run(body, 0) != len(body):
        return None
    significant = body.lstrip("0")
    if len(significant) > 19:
        return None
    exponent = int(significant or "0")
    exponent = -exponent if text[0] == "-" else exponent
    return exponent if _MIN <= exponent <= _MAX else None


def _from_text(value: object, text: str) -> Decimal:
    text = text.strip(_BLANKS)
    i = 1 if text[:1] in ("+", "-") else 0
    negative = text[:1] == "-"
    j = _digit_run(text, i)
    whole, frac = text[i:j], ""
    if text[j : j + 1] == ".":
        k = _digit_run(text, j + 1)
        frac, j = text[j + 1 : k], k
    suffix = text[j:]
    if not whole and not frac:  # a digit is required, as the documented grammar has it
        raise _bad(value)
    if suffix in _SUFFIX:
        power, shift = _SUFFIX[suffix]
    elif suffix[:1] in ("e", "E") and (exponent := _exponent(suffix[1:])) is not None:
        power, shift = exponent, 0
    else:
        raise _bad(value)
    mantissa = Decimal(f"{whole or 0}.{frac}")
    if not mantissa:
        return _ZERO
    top = mantissa.adjusted() + power  # 10**top <= |q| < 10**(top + 1) * 2**shift
    if top >= 19:  # beyond the int64 range whatever the rest: saturates below
        q = _BEYOND
    elif top + 20 <= -9:  # below a nano-unit, where upstream rounds a non-zero value up to
        q = _NANO
    else:
        digits = len(whole) + len(frac)
        exact = _EXACT if digits <= 40 else Context(prec=digits + 60, Emax=MAX_EMAX, Emin=MIN_EMIN)
        q = exact.multiply(mantissa.copy_abs().scaleb(power, exact), 2**shift)
        q = q.quantize(_NANO, rounding=ROUND_UP, context=exact)
    if shift and q > _MAX:  # upstream caps a binary-suffixed quantity, not a decimal one
        q = Decimal(_MAX)
    return max(q.copy_negate(), Decimal(_MIN)) if negative else min(q, Decimal(_MAX))


def _quantity(value: object) -> Decimal:
    """The value upstream holds for a JSON value, within the int64 range; BadRequest if none."""
    if isinstance(value, str):
        return _from_text(value, value)
    if isinstance(value, bool):  # a JSON boolean, though Python's bool is an int
        raise _bad(value)
    if isinstance(value, int):
        return Decimal(max(_MIN, min(_MAX, value)))
    if isinstance(value, float):
        return _from_text(value, repr(value))  # "inf"/"nan" do not parse
    if value is None:
        return _ZERO  # JSON null unmarshals to the zero Quantity
    raise _bad(value)


def _round(q: Decimal) -> int:
    return max(_MIN, min(_MAX, int(q.to_integral_value(rounding=ROUND_UP))))


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity exactly (nano-units, int64-saturated); raises BadRequest if malformed."""
    return Fraction(_quantity(value))


def to_milli(value: object) -> int:
    """CPU-style: millicores, rounded up (away from zero)."""
    return _round(_SMALL.multiply(_quantity(value), _THOUSAND))


def to_units(value: object) -> int:
    """Memory/pods-style: whole units, rounded up (away from zero)."""
    return _round(_quantity(value))


def format_cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_memory(units: int) -> str:
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if units and units % size == 0:
            return f"{units // size}{suffix}"
    return str(units)
