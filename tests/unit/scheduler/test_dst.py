"""A daily 02:30 cron across DST changes runs once per day: with the Schedule alone, and with the
beat's planner driven by a controllable clock through both DST nights."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from beatflow.dag.schedule import Schedule
from beatflow.scheduler.plan import ScheduleSpec, plan_fires

BERLIN = ZoneInfo("Europe/Berlin")
DAILY = Schedule.parse("30 2 * * *", BERLIN)


def test_a_daily_0230_job_runs_once_on_the_spring_forward_day_at_0330_local() -> None:
    # 2026-03-29: clocks jump 02:00 -> 03:00 in Berlin; 02:30 does not exist that night.
    ticks = list(
        DAILY.ticks(datetime(2026, 3, 27, 12, tzinfo=UTC), datetime(2026, 3, 31, 12, tzinfo=UTC))
    )
    local = [t.astimezone(BERLIN).strftime("%m-%d %H:%M") for t in ticks]
    assert local == ["03-28 02:30", "03-29 03:30", "03-30 02:30", "03-31 02:30"]


def test_a_daily_0230_job_runs_once_on_the_fall_back_day_at_its_first_occurrence() -> None:
    # 2026-10-25: clocks go back 03:00 -> 02:00; 02:30 happens twice (CEST, then CET).
    ticks = list(
        DAILY.ticks(datetime(2026, 10, 23, 12, tzinfo=UTC), datetime(2026, 10, 27, 12, tzinfo=UTC))
    )
    assert [t.astimezone(BERLIN).day for t in ticks] == [24, 25, 26, 27]
    fall_back = ticks[1]
    assert fall_back == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # 02:30 CEST (+02:00)


def run_clock(start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    """Drive the planner like a beat whose clock advances by ``step``; return fired ticks."""
    spec = ScheduleSpec("daily", DAILY, None, None, False, 1)
    watermark = DAILY.prev_at_or_before(start)
    fired: list[datetime] = []
    now = start
    while now <= end:
        plan = plan_fires(
            spec,
            watermark,
            now,
            failover_grace=timedelta(seconds=10),
            catchup_window=timedelta(days=1),
            limit=100,
        )
        fired += [f.tick for f in plan.fires]
        watermark = plan.watermark
        now += step
    return fired


def test_the_planner_fires_the_daily_0230_job_once_per_day_across_both_dst_changes() -> None:
    for begin in (datetime(2026, 3, 26, tzinfo=UTC), datetime(2026, 10, 22, tzinfo=UTC)):
        fired = run_clock(begin, begin + timedelta(days=6), timedelta(minutes=7))
        days = [t.astimezone(BERLIN).date() for t in fired]
        assert len(fired) == 6
        assert len(set(days)) == len(days)  # one run per local day, none twice


NEW_YORK = ZoneInfo("America/New_York")


def _utc(day: int, month: int, hour: int, minute: int) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


def test_asked_inside_the_spring_forward_gap_the_next_tick_is_that_days_shifted_run() -> None:
    # 2026-03-08, New York: 02:00 EST -> 03:00 EDT (07:00 UTC); 02:30 runs at 03:30 EDT. A beat
    # (re)started at 03:07 EDT asks from just past the gap: that day's run is still ahead.
    daily = Schedule.parse("30 2 * * *", NEW_YORK)
    assert daily.next_after(_utc(8, 3, 7, 7)) == _utc(8, 3, 7, 30)
    assert daily.next_after(_utc(8, 3, 6, 59)) == _utc(8, 3, 7, 30)  # 01:59 EST, before it
    assert daily.next_after(_utc(8, 3, 7, 30)) == _utc(9, 3, 6, 30)  # then the 9th, 02:30 EDT
    assert daily.prev_at_or_before(_utc(8, 3, 7, 45)) == _utc(8, 3, 7, 30)


def test_asked_inside_the_repeated_fall_back_hour_the_day_runs_once_at_the_first_pass() -> None:
    # 2026-11-01, New York: 02:00 EDT -> 01:00 EST (06:00 UTC); 01:30 happens at 05:30 UTC
    # (EDT) and again at 06:30 UTC (EST). The run is the first one; the repeat is no tick.
    daily = Schedule.parse("30 1 * * *", NEW_YORK)
    first, next_day = _utc(1, 11, 5, 30), _utc(2, 11, 6, 30)
    assert daily.next_after(_utc(1, 11, 5, 10)) == first  # 01:10 EDT, first pass
    assert daily.next_after(_utc(1, 11, 5, 45)) == next_day  # 01:45 EDT: not the repeat
    assert daily.next_after(_utc(1, 11, 6, 10)) == next_day  # 01:10 EST, second pass
    assert daily.prev_at_or_before(_utc(1, 11, 6, 10)) == first
    assert daily.prev_at_or_before(_utc(1, 11, 6, 45)) == first  # 01:45 EST, after the repeat
