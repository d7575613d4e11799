"""The API's timestamps, written in one form and read back the same by every reader
(kube/times.py)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kube.times import epoch_seconds, format_micro_time, format_time, parse_time

NOON = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:00:00Z", NOON),  # metav1.Time
        ("2024-05-01T12:00:00.250000Z", NOON + dt.timedelta(milliseconds=250)),  # MicroTime
        ("2024-05-01T14:00:00+02:00", NOON),
        ("2024-05-01T12:00:00", NOON),  # no offset: UTC, never the reader's local time
    ],
)
def test_rfc3339_times_read_as_aware_datetimes_and_seconds(
    text: str, expected: dt.datetime
) -> None:
    parsed = parse_time(text)
    assert parsed == expected and parsed is not None and parsed.tzinfo is not None
    assert epoch_seconds(text) == expected.timestamp()


@pytest.mark.parametrize("value", [None, "", "yesterday", "2024-13-01T00:00:00Z", 1714564800])
def test_an_absent_or_malformed_time_reads_as_none(value: object) -> None:
    assert parse_time(value) is None
    assert epoch_seconds(value) is None


def test_times_are_written_in_utc_to_the_second_or_the_microsecond() -> None:
    local = NOON.astimezone(dt.timezone(dt.timedelta(hours=-7)))
    assert format_time(local) == "2024-05-01T12:00:00Z"
    assert format_time(NOON.replace(tzinfo=None)) == "2024-05-01T12:00:00Z"  # naive: UTC
    assert format_micro_time(NOON + dt.timedelta(microseconds=5)) == "2024-05-01T12:00:00.000005Z"
    assert parse_time(format_time()) is not None


# Kubernetes' times are four-digit years (strftime writes year 999 as "999").
@given(
    st.datetimes(
        min_value=dt.datetime(1971, 1, 1),
        max_value=dt.datetime(9998, 12, 31),
        timezones=st.timezones(),
    )
)
def test_a_written_time_reads_back_as_the_same_instant(when: dt.datetime) -> None:
    assert parse_time(format_micro_time(when)) == when.astimezone(dt.UTC)
    assert parse_time(format_time(when)) == when.astimezone(dt.UTC).replace(microsecond=0)
