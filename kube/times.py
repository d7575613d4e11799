"""The API's timestamps, written and read back: RFC 3339 strings (``metav1.Time``,
``MicroTime``) from a datetime, and as an aware datetime or POSIX seconds.

One definition for every reader of an object's times — the binder (creation → bound, bound →
ready), the garbage collector (expiry annotations, pending deadlines), the image preparer
(``readyAt``) and the facade (an announcement's ``expiresAt``, its age) — so a malformed or
absent time reads the same everywhere: as None, never as a crash, and a time without an
offset as UTC (the API server always writes ``Z``; a hand-written annotation might not).
The writers (Events, Leases, the expiry annotation, an announcement's times) use
:func:`format_time` and :func:`format_micro_time`, so every time Sandman writes has one form.
"""

from __future__ import annotations

import datetime as dt
import functools

__all__ = ["epoch_seconds", "format_micro_time", "format_time", "parse_time"]


def format_time(when: dt.datetime | None = None) -> str:
    """``metav1.Time``: RFC 3339 in UTC to the second, ``2024-05-01T12:00:00Z`` (default:
    now). A naive datetime is taken as UTC."""
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(when: dt.datetime | None = None) -> str:
    """``metav1.MicroTime`` (Lease renewals): as :func:`format_time`, with microseconds."""
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc(when: dt.datetime | None) -> dt.datetime:
    if when is None:
        return dt.datetime.now(dt.UTC)
    return when.astimezone(dt.UTC) if when.tzinfo else when.replace(tzinfo=dt.UTC)


def parse_time(value: object) -> dt.datetime | None:
    """``2024-05-01T12:00:00Z`` (or with fractions, or an offset) as an aware datetime;
    None if ``value`` is not such a string."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def epoch_seconds(value: object) -> float | None:
    """:func:`parse_time` as POSIX seconds (None if absent or malformed)."""
    if not isinstance(value, str) or not value:
        return None
    return _seconds(value)


@functools.lru_cache(maxsize=4096)
def _seconds(value: str) -> float | None:
    """API timestamps have 1 s resolution, so a burst repeats the same few strings."""
    parsed = parse_time(value)
    return None if parsed is None else parsed.timestamp()
