"""A stand-in for the few ``pendulum`` calls DAG files make (``pendulum.datetime``,
``pendulum.now``, ``pendulum.duration``...), used only while the loader runs a DAG module and only
when pendulum itself is not installed (it is Airflow's dependency, not beatflow's)."""

from __future__ import annotations

import types
from datetime import UTC, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo


def _tz(tz: str | tzinfo | None) -> tzinfo:
    if tz is None or tz == "UTC":
        return UTC if tz is None else ZoneInfo("UTC")
    return tz if isinstance(tz, tzinfo) else ZoneInfo(tz)


def _datetime(
    year: int,
    month: int = 1,
    day: int = 1,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    microsecond: int = 0,
    tz: str | tzinfo | None = "UTC",
) -> datetime:
    return datetime(year, month, day, hour, minute, second, microsecond, tzinfo=_tz(tz))


def _now(tz: str | tzinfo | None = None) -> datetime:
    return datetime.now(_tz(tz))


def _today(tz: str | tzinfo | None = None) -> datetime:
    return _now(tz).replace(hour=0, minute=0, second=0, microsecond=0)


def _duration(
    days: float = 0,
    seconds: float = 0,
    minutes: float = 0,
    hours: float = 0,
    weeks: float = 0,
    microseconds: float = 0,
    milliseconds: float = 0,
) -> timedelta:
    return timedelta(
        days=days,
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        weeks=weeks,
        microseconds=microseconds,
        milliseconds=milliseconds,
    )


def module() -> types.ModuleType:
    m = types.ModuleType("pendulum", __doc__)
    m.__dict__.update(
        datetime=_datetime,
        now=_now,
        today=_today,
        duration=_duration,
        timezone=_tz,
        UTC=ZoneInfo("UTC"),
        DateTime=datetime,
        time=time,
        Duration=timedelta,
    )
    return m
