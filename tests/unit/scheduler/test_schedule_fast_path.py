"""Schedule's cron arithmetic starts its walk at the instant away from DST changes and an hour
off near them: both must give the ticks a full one-hour walk gives, in every zone and season."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from beatflow.dag.schedule import Schedule

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Tokyo", "UTC"]
CRONS = ["* * * * *", "30 2 * * *", "*/7 1-3 * * *", "15 * * * *"]


def _localize(naive: datetime, tz: ZoneInfo) -> datetime:
    """The documented policy, written out case by case (not the production helper): a repeated
    wall time is its first occurrence, a skipped one is shifted forward by the gap."""
    first = naive.replace(tzinfo=tz, fold=0).utcoffset()
    second = naive.replace(tzinfo=tz, fold=1).utcoffset()
    assert first is not None and second is not None
    if first >= second:  # ordinary, or repeated (fall back: the first has the larger offset)
        return (naive - first).replace(tzinfo=UTC)
    # spring forward: the wall time does not exist; move it forward by the gap, then read it
    # with the offset after the jump
    shifted = naive + (second - first)
    return (shifted - second).replace(tzinfo=UTC)


def slow_next(s: Schedule, instant: datetime) -> datetime:
    local = instant.astimezone(s.timezone).replace(tzinfo=None)
    it = croniter(s.cron, local - timedelta(hours=1))
    while True:
        tick = _localize(it.get_next(datetime), s.timezone)
        if tick > instant:
            return tick


def slow_prev(s: Schedule, instant: datetime) -> datetime:
    local = instant.astimezone(s.timezone).replace(tzinfo=None)
    it = croniter(s.cron, local + timedelta(hours=1, seconds=1))
    while True:
        tick = _localize(it.get_prev(datetime), s.timezone)
        if tick <= instant:
            return tick


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("cron", CRONS)
def test_next_and_prev_ticks_match_a_full_hour_walk_across_dst_changes(
    zone: str, cron: str
) -> None:
    s = Schedule.parse(cron, ZoneInfo(zone))
    for start in (
        datetime(2026, 3, 7, tzinfo=UTC),
        datetime(2026, 3, 27, tzinfo=UTC),
        datetime(2026, 10, 3, tzinfo=UTC),
        datetime(2026, 10, 24, tzinfo=UTC),
        datetime(2026, 11, 1, tzinfo=UTC),
    ):
        instant = start
        while instant < start + timedelta(days=2):
            assert s.next_after(instant) == slow_next(s, instant), instant
            assert s.prev_at_or_before(instant) == slow_prev(s, instant), instant
            instant += timedelta(minutes=31, seconds=7)
