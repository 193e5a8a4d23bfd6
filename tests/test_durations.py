from __future__ import annotations

import datetime as dt

import pytest

from agentdb.durations import older_than, parse_duration, parse_timestamp


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0s", 0),
        ("30m", 1800),
        ("12h", 43200),
        ("90d", 90 * 86400),
        ("2w", 14 * 86400),
        ("1d12h", 86400 + 12 * 3600),
        ("1y", 365 * 86400),
        ("1y2w3d4h5m6s", 365 * 86400 + 17 * 86400 + 4 * 3600 + 5 * 60 + 6),
        ("1000y", 1000 * 365 * 86400),
    ],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "d",
        "5",
        "-1d",
        "1.5h",
        "10 d d",
        "9999999999d",
        "12h1d",
        "1d1d",
        "1d 12h",
        "1001y",
        "1D",
        "1d12",
    ],
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_parse_timestamp() -> None:
    t = parse_timestamp("2026-01-02T03:04:05.123Z")
    assert t == dt.datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=dt.timezone.utc)
    assert parse_timestamp("garbage") is None
    assert parse_timestamp(None) is None
    assert parse_timestamp("x" * 100) is None


def test_older_than_zero_selects_up_to_now() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    assert older_than(now, dt.timedelta(0), now)
    assert not older_than(now + dt.timedelta(seconds=1), dt.timedelta(0), now)
    assert older_than(now - dt.timedelta(days=91), parse_duration("90d"), now)
    assert not older_than(now - dt.timedelta(days=89), parse_duration("90d"), now)
