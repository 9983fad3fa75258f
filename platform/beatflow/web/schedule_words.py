"""Schedules in words for people: ``0 2 * * *`` in Europe/Paris reads "every day at 02:00
(Europe/Paris)"; what has no plain wording falls back to the cron expression."""

from __future__ import annotations

from datetime import timedelta

from beatflow.dag.schedule import Schedule

_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


def interval_words(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds % size == 0:
            n = seconds // size
            return f"every {unit}" if n == 1 else f"every {n} {unit}s"
    return f"every {delta}"


def _num(field: str, hi: int) -> int | None:
    return int(field) if field.isdigit() and int(field) <= hi else None


def schedule_words(schedule: Schedule | None) -> str:
    if schedule is None:
        return "manual only"
    if schedule.once:
        return f"once, at {schedule.anchor:%Y-%m-%d %H:%M} UTC"
    if schedule.interval is not None:
        return interval_words(schedule.interval)
    assert schedule.cron is not None
    minute, hour, dom, month, dow = schedule.cron.split()
    zone = "" if schedule.timezone.key == "UTC" else f" ({schedule.timezone.key})"
    m, h = _num(minute, 59), _num(hour, 23)
    if minute.startswith("*/") and minute[2:].isdigit() and (hour, dom, month, dow) == ("*",) * 4:
        return f"every {int(minute[2:])} minutes"
    if (minute, hour, dom, month, dow) == ("*",) * 5:
        return "every minute"
    if m is not None and (hour, dom, month, dow) == ("*",) * 4:
        return f"every hour at minute {m}"
    if m is not None and h is not None and month == "*":
        at = f"{h:02d}:{m:02d}{zone}"
        if dom == "*" and dow == "*":
            return f"every day at {at}"
        if dom == "*" and dow.isdigit() and int(dow) <= 7:
            return f"every {_DAYS[int(dow) % 7]} at {at}"
        if dom == "*" and dow in ("1-5", "MON-FRI", "mon-fri"):
            return f"every weekday at {at}"
        if dow == "*" and dom.isdigit():
            return f"on day {int(dom)} of every month at {at}"
    return f"cron {schedule.cron}{zone}"
