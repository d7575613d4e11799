"""Kubernetes resource quantities ("250m", "512Mi", "1.5", "2e3") as exact integers.

Admission (kubelet) and quota checks compare sums of quantities; doing that on floats would
make "0.1 + 0.2 CPU" disagree with the real server, so CPU is kept in millicores and
everything else in whole units (bytes, pods), both rounded up as upstream does.

The scheduler has a parser of its own (scheduler/quantity.py) on purpose: simcluster imports
no other Sandman component (an import-linter contract), so a parsing bug in the code under
test cannot be mirrored by the simulator that checks it.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from simcluster.errors import BadRequest

__all__ = ["format_cpu", "format_memory", "parse_quantity", "to_milli", "to_units"]

_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity exactly; raises BadRequest on malformed input."""
    if isinstance(value, int | float):
        return Fraction(value)
    m = _RE.match(value.strip())
    if not m:
        raise BadRequest(f"quantities must match the regular expression {_RE.pattern!r}: {value!r}")
    number, exponent, suffix = m.groups()
    q = Fraction(number)
    if exponent:
        q *= Fraction(10) ** int(exponent[1:])
    return q * _SUFFIX[suffix or ""]


def to_milli(value: str | int | float) -> int:
    """CPU-style: millicores, rounded up."""
    return math.ceil(parse_quantity(value) * 1000)


def to_units(value: str | int | float) -> int:
    """Memory/pods-style: whole units, rounded up."""
    return math.ceil(parse_quantity(value))


def format_cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_memory(units: int) -> str:
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if units and units % size == 0:
            return f"{units // size}{suffix}"
    return str(units)
