"""Schedules as UTC tick arithmetic, including the DST rule for cron in a local time zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from beatflow.dag.schedule import Schedule

PARIS = ZoneInfo("Europe/Paris")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_hourly_cron_ticks_on_the_hour():
    s = Schedule.parse("@hourly", ZoneInfo("UTC"))
    assert s.next_after(utc(2026, 1, 1, 10, 0)) == utc(2026, 1, 1, 11, 0)
    assert s.prev_at_or_before(utc(2026, 1, 1, 10, 30)) == utc(2026, 1, 1, 10, 0)
    assert list(s.ticks(utc(2026, 1, 1, 10), utc(2026, 1, 1, 13))) == [
        utc(2026, 1, 1, 11),
        utc(2026, 1, 1, 12),
        utc(2026, 1, 1, 13),
    ]


def test_intervals_are_anchored_at_the_start_date():
    s = Schedule.parse(timedelta(minutes=15), ZoneInfo("UTC"), anchor=utc(2026, 1, 1, 0, 5))
    assert s.next_after(utc(2026, 1, 1, 0, 6)) == utc(2026, 1, 1, 0, 20)
    assert s.prev_at_or_before(utc(2026, 1, 1, 0, 4)) is None


def daily_0230_ticks(start: datetime, days: int) -> list[datetime]:
    s = Schedule.parse("30 2 * * *", PARIS)
    return list(s.ticks(start, start + timedelta(days=days)))


def test_a_daily_0230_job_runs_once_on_the_spring_forward_night_an_hour_later():
    # 2026-03-29: Paris jumps from 02:00 to 03:00; 02:30 does not exist.
    ticks = daily_0230_ticks(utc(2026, 3, 27, 12), 3)
    local = [t.astimezone(PARIS) for t in ticks]
    assert [t.day for t in local] == [28, 29, 30]
    assert local[1].hour == 3 and local[1].minute == 30  # shifted past the gap, once
    assert local[0].hour == local[2].hour == 2


def test_a_daily_0230_job_runs_once_on_the_fall_back_night_at_the_first_0230():
    # 2026-10-25: Paris goes from 03:00 back to 02:00; 02:30 happens twice.
    ticks = daily_0230_ticks(utc(2026, 10, 23, 12), 3)
    local = [t.astimezone(PARIS) for t in ticks]
    assert [t.day for t in local] == [24, 25, 26]
    assert local[1].hour == 2 and local[1].utcoffset() == timedelta(hours=2)  # first occurrence
    assert ticks[1] == utc(2026, 10, 25, 0, 30)


def test_hourly_cron_across_fall_back_fires_each_wall_hour_once():
    s = Schedule.parse("0 * * * *", PARIS)
    ticks = list(s.ticks(utc(2026, 10, 24, 22), utc(2026, 10, 25, 4)))
    assert len(ticks) == len(set(ticks))
    walls = [t.astimezone(PARIS).strftime("%H") for t in ticks]
    assert walls.count("02") == 1


@pytest.mark.parametrize("bad", ["* * *", "60 * * * *", "@fortnightly", "hello"])
def test_bad_cron_strings_say_what_is_expected(bad):
    with pytest.raises(ValueError, match="cron|preset"):
        Schedule.parse(bad, ZoneInfo("UTC"))
