"""Kubernetes quantities as data: one table that both Sandman parsers must answer alike.

The scheduler (scheduler/quantity.py) and the simulated API server (simcluster/quantity.py)
parse quantities separately on purpose; tests/test_quantity_table.py runs every row below
against both. The reference is upstream: ``ParseQuantity`` in k8s.io/apimachinery
(pkg/api/resource), reached the way ``Quantity.UnmarshalJSON`` reaches it from a JSON value,
then read out with ``MilliValue()`` and ``Value()``.

A row is a decoded JSON value (what ``json.loads`` hands the parsers) and the expected
``(millis, units)``, both rounded up, away from zero, or :data:`REJECTED`. Where upstream has
no defined answer, the table pins ours:

- upstream's int64 accessors overflow silently (the result is undefined); we saturate at
  the int64 bounds, :data:`MAX` and :data:`MIN`. Upstream *parses* such values (a decimal one
  is held exactly, a binary-suffixed one is capped at 2**63-1), so they are not rejected;
- upstream keeps a decimal exponent as an int32 (truncating a larger int64); we take the
  exponent as written;
- a string's JSON escapes are decoded before we see it; upstream parses the raw bytes
  between the quotes, so a quantity written with an escape is rejected there. We take a
  character JSON can carry unescaped (a space, U+00A0, ...) to have been written as itself,
  and one it cannot (a tab, a newline) to have been an escape;
- a float is read as the shortest decimal that round-trips (what ``json.dumps`` writes),
  which is the JSON text whenever that number fitted a double;
- a number needs a digit, as upstream's documented grammar says. Its scanner is laxer: it
  reads "+", ".", "m", "Ti" or "e-9" as 0, yet rejects "Pi", "Ei" or "e-10", whose value
  takes its arbitrary-precision path, which wants a digit. We keep to the grammar, as
  Sandman's parsers always did; nothing writes such a quantity, and an API server stores
  and returns the ones it takes as "0".
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = ["CASES", "MAX", "MIN", "REJECTED", "Case"]

MAX: Final = 2**63 - 1
MIN: Final = -(2**63)
REJECTED: Final = "rejected"
GI: Final = 2**30


class Case(NamedTuple):
    value: object
    expect: tuple[int, int] | str  # (MilliValue, Value), or REJECTED


CASES: tuple[Case, ...] = (
    # --- plain decimals ------------------------------------------------------------------
    Case("0", (0, 0)),
    Case("1", (1000, 1)),
    Case("16", (16_000, 16)),
    Case("110", (110_000, 110)),
    Case("250m", (250, 1)),
    Case("1500m", (1500, 2)),
    Case("0.5", (500, 1)),
    Case("1.5", (1500, 2)),
    Case("00012", (12_000, 12)),  # leading zeros are fine
    Case("1.000", (1000, 1)),
    Case(".5", (500, 1)),  # <number> ::= .<digits>
    Case("5.", (5000, 5)),  # <number> ::= <digits>.
    Case("1.G", (10**12, 10**9)),  # "1." before a suffix too
    # --- below a milli: parsing keeps nano-units, rounding a finer value away from zero ----
    Case("0.1m", (1, 1)),  # MilliValue() rounds up
    Case("1n", (1, 1)),
    Case("1u", (1, 1)),
    Case("3.001n", (1, 1)),
    Case("1000000n", (1, 1)),  # exactly 1m
    Case("1000001n", (2, 1)),  # one nano past 1m
    Case("0.0000000001", (1, 1)),  # a tenth of a nano is stored as 1n
    Case("1.0000000001", (1001, 2)),
    Case("0.30000000000000004", (301, 1)),  # a float's digits, written out in full
    # --- decimal suffixes ----------------------------------------------------------------
    Case("2k", (2_000_000, 2000)),
    Case("100.035k", (100_035_000, 100_035)),
    Case("7.123456M", (7_123_456_000, 7_123_456)),
    Case("1M", (10**9, 10**6)),
    Case("1G", (10**12, 10**9)),
    Case("1T", (10**15, 10**12)),
    Case("1P", (10**18, 10**15)),
    Case("1E", (MAX, 10**18)),  # the suffix E (exa); 10**21 millis overflow int64: saturated
    Case("12E", (MAX, MAX)),  # 1.2e19: a decimal value is not capped upstream, we saturate
    # --- binary suffixes -----------------------------------------------------------------
    Case("1Ki", (1_024_000, 1024)),
    Case(".5Ki", (512_000, 512)),
    Case("100.035Ki", (102_435_840, 102_436)),  # 102435.84
    Case("0.000000000001Ki", (1, 1)),  # 1.024n is stored as 2n
    Case("0.5Mi", (524_288_000, 524_288)),
    Case("512Mi", (512 * 2**20 * 1000, 512 * 2**20)),
    Case("1Gi", (GI * 1000, GI)),
    Case("1.5Gi", (3 * 2**29 * 1000, 3 * 2**29)),
    Case("64Gi", (64 * GI * 1000, 64 * GI)),
    Case("1Ti", (2**40 * 1000, 2**40)),
    Case("1Pi", (2**50 * 1000, 2**50)),
    Case("1Ei", (MAX, 2**60)),
    Case("7Ei", (MAX, 7 * 2**60)),
    Case("8Ei", (MAX, MAX)),  # 2**63: upstream caps a binary-suffixed value at 2**63-1
    Case("9223372036854775807Ki", (MAX, MAX)),
    Case("-8Ei", (MIN, -MAX)),  # the cap is on the magnitude: -(2**63-1), not int64's -2**63
    Case("1Ki5", REJECTED),
    Case("1KiB", REJECTED),
    Case("1ki", REJECTED),
    Case("1K", REJECTED),  # kilo is a lower-case k
    Case("1mi", REJECTED),
    Case("1i", REJECTED),
    Case(".5i", REJECTED),
    # --- decimal exponents ---------------------------------------------------------------
    Case("1e3", (10**6, 1000)),
    Case("1E3", (10**6, 1000)),  # E followed by digits is an exponent, not exa
    Case("1e+3", (10**6, 1000)),
    Case("1e03", (10**6, 1000)),  # the exponent is read as an int64: leading zeros are fine
    Case("1.5e2", (150_000, 150)),
    Case("12e-1", (1200, 2)),
    Case("1E-3", (1, 1)),
    Case("1e-4", (1, 1)),
    Case("0.5e-2", (5, 1)),
    Case("1e18", (MAX, 10**18)),
    Case("1e19", (MAX, MAX)),
    Case("-1e19", (MIN, MIN)),
    Case("1e999999999", (MAX, MAX)),  # must answer at once, not build 10**999999999
    Case("-1e999999999", (MIN, MIN)),
    Case("1e-999999999", (1, 1)),
    Case("0e999999999", (0, 0)),
    Case("1e9223372036854775807", (MAX, MAX)),  # int64 exponent (upstream: int32-truncated)
    Case("1e-9223372036854775808", (1, 1)),
    Case("1e9223372036854775808", REJECTED),  # the exponent does not fit an int64
    Case("1e" + "0" * 5000 + "3", (10**6, 1000)),  # a long exponent of leading zeros
    Case("1e", REJECTED),
    Case("1e+", REJECTED),
    Case("-3.01e-", REJECTED),
    Case("1e1.5", REJECTED),
    Case("1e3m", REJECTED),
    Case("1ee3", REJECTED),
    Case("1e+-3", REJECTED),
    Case("1e 3", REJECTED),
    # --- signs ---------------------------------------------------------------------------
    Case("+1", (1000, 1)),
    Case("-1", (-1000, -1)),  # negative quantities parse; refusing a request is validation
    Case("-1.5", (-1500, -2)),  # rounded away from zero, as upstream's Value() does
    Case("-0.5", (-500, -1)),
    Case("-0.1m", (-1, -1)),
    Case("-250m", (-250, -1)),
    Case("-0", (0, 0)),
    Case("+0.0", (0, 0)),
    Case("--1", REJECTED),
    Case("+-1", REJECTED),
    Case("1-", REJECTED),
    Case("1+1", REJECTED),
    Case("- 1", REJECTED),
    # --- no digit at all: see the module docstring (upstream reads some of these as 0) -----
    Case("+", REJECTED),
    Case("-", REJECTED),
    Case(".", REJECTED),
    Case("m", REJECTED),
    Case("Gi", REJECTED),  # upstream: 0
    Case("Pi", REJECTED),  # upstream: rejected too (its slow path needs a digit)
    Case("e3", REJECTED),
    Case("-.Ki", REJECTED),
    # --- the int64 bounds ----------------------------------------------------------------
    Case("9223372036854775807", (MAX, MAX)),  # units exact, millis saturated
    Case("9223372036854775808", (MAX, MAX)),
    Case("-9223372036854775808", (MIN, MIN)),  # exactly int64's minimum (decimal: no cap)
    Case("-9223372036854775809", (MIN, MIN)),
    Case("9223372036854775807m", (MAX, 9_223_372_036_854_776)),  # the most millis that fit
    Case("9223372036854775808m", (MAX, 9_223_372_036_854_776)),
    # --- long texts: bounded work, and past Python's 4300-digit int() limit ----------------
    Case("1" + "0" * 5000, (MAX, MAX)),
    Case("0" * 5000 + "1", (1000, 1)),
    Case("0." + "0" * 5000 + "1", (1, 1)),
    Case("1." + "0" * 5000 + "1", (1001, 2)),
    Case("1." + "0" * 5000 + "1Ki", (1_024_001, 1025)),  # 1024 plus a sliver
    Case("-1." + "0" * 5000 + "1", (-1001, -2)),
    # --- whitespace: trimmed as Go's strings.TrimSpace does, when JSON can hold it raw -----
    Case(" 1", (1000, 1)),
    Case("1 ", (1000, 1)),
    Case("  250m  ", (250, 1)),
    Case("\u00a01Gi", (GI * 1000, GI)),  # NO-BREAK SPACE is a space to Go
    Case("\u30002", (2000, 2)),  # IDEOGRAPHIC SPACE
    Case("1\u2028", (1000, 1)),  # LINE SEPARATOR
    Case("\t1", REJECTED),  # a JSON string holds a tab only as the escape \t: raw "\t1"
    Case("1\n", REJECTED),
    Case("\r\n1", REJECTED),
    Case("1\x1f", REJECTED),  # Python's str.strip() trims U+001F; Go's TrimSpace does not
    Case("\u200b1", REJECTED),  # ZERO WIDTH SPACE is not a space
    Case("1 Gi", REJECTED),
    Case("", REJECTED),
    Case("   ", REJECTED),  # nothing left once trimmed
    # --- digits are ASCII digits (str.isdigit and re's \d say otherwise) ------------------
    Case("\u0663", REJECTED),  # ARABIC-INDIC DIGIT THREE
    Case("1\u0663", REJECTED),
    Case("\u06f1Gi", REJECTED),  # EXTENDED ARABIC-INDIC DIGIT ONE
    Case("\u00b2", REJECTED),  # SUPERSCRIPT TWO: isdigit() is True, int() refuses it
    Case("\uff11", REJECTED),  # FULLWIDTH DIGIT ONE
    Case("\U0001d7cf", REJECTED),  # MATHEMATICAL BOLD DIGIT ONE
    Case("1.\u0665", REJECTED),
    Case("1e\u0663", REJECTED),
    # --- not numbers at all --------------------------------------------------------------
    Case("abc", REJECTED),
    Case("1.2.3", REJECTED),
    Case("5Mb", REJECTED),
    Case("0x10", REJECTED),
    Case("1_000", REJECTED),  # Python's int() accepts underscores
    Case("1,5", REJECTED),
    Case("NaN", REJECTED),
    Case("nan", REJECTED),
    Case("inf", REJECTED),
    Case("-Infinity", REJECTED),
    Case("e", REJECTED),
    Case("i", REJECTED),
    Case("true", REJECTED),
    Case("null", REJECTED),  # the string, not JSON null
    # --- JSON numbers --------------------------------------------------------------------
    Case(0, (0, 0)),
    Case(1, (1000, 1)),
    Case(110, (110_000, 110)),
    Case(-1, (-1000, -1)),
    Case(2**63 - 1, (MAX, MAX)),
    Case(2**63, (MAX, MAX)),
    Case(-(2**63), (MIN, MIN)),
    Case(10**5000, (MAX, MAX)),  # an int needs no digit parsing, however long
    Case(1.5, (1500, 2)),
    Case(0.1, (100, 1)),  # the JSON said 0.1; Fraction(0.1) is 0.1000000000000000055...: 101
    Case(2.5e-4, (1, 1)),
    Case(1e3, (10**6, 1000)),  # repr "1000.0"
    Case(1e22, (MAX, MAX)),  # repr "1e+22"
    Case(1e-7, (1, 1)),  # repr "1e-07"
    Case(123456789.123, (123_456_789_123, 123_456_790)),
    Case(-0.0, (0, 0)),
    Case(-1.5, (-1500, -2)),
    Case(5e-324, (1, 1)),  # the smallest double
    Case(1.7976931348623157e308, (MAX, MAX)),  # the largest
    Case(float("nan"), REJECTED),  # json.loads takes NaN and Infinity; JSON has neither
    Case(float("inf"), REJECTED),
    Case(float("-inf"), REJECTED),
    # --- other JSON values ---------------------------------------------------------------
    Case(True, REJECTED),  # a JSON boolean; Python's True is an int (== 1)
    Case(False, REJECTED),  # ... and False == 0
    Case(None, (0, 0)),  # JSON null unmarshals to the zero Quantity
    Case([], REJECTED),
    Case(["1"], REJECTED),
    Case({}, REJECTED),
    Case({"value": "1"}, REJECTED),
    Case(b"1", REJECTED),  # bytes are no JSON value
)
