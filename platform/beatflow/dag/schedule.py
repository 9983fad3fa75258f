"""Schedules as pure tick arithmetic in UTC instants: cron strings (and presets) evaluated in the
DAG's time zone, and fixed intervals. Time-zone rule for cron, documented in the README:
every local time the expression lists fires once; a local time that occurs twice (clocks go back)
fires at its first occurrence; a local time that does not exist (clocks go forward) fires at the
first instant after the gap (02:30 on a spring-forward night fires at 03:30)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

PRESETS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# After the one tick of "@once": a next tick that never comes (callers compare, never fire it)
NEVER = datetime(9999, 1, 1, tzinfo=UTC)
CRON_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day-of-month", 1, 31), ("month", 1, 12),
               ("day-of-week", 0, 7))  # fmt: skip


def cron_problem(expr: str) -> str:
    """What is wrong with cron ``expr``, naming the field: "hour field 25 out of range 0-23"."""
    parts = expr.split()
    if len(parts) != 5:
        return (
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}; "
            "e.g. '0 * * * *'"
        )
    for i, (name, lo, hi) in enumerate(CRON_FIELDS):
        probe = ["*"] * 5
        probe[i] = parts[i]
        if croniter.is_valid(" ".join(probe)):
            continue
        for token in parts[i].split(","):
            base, _, step = token.partition("/")
            for number in re.findall(r"\d+", base):
                if not lo <= int(number) <= hi:
                    return f"{name} field {number} out of range {lo}-{hi}"
            if step.isdigit() and int(step) == 0:
                return f"{name} field {parts[i]!r}: a step of 0"
        return f"{name} field {parts[i]!r} is not valid"
    return "the fields are valid one by one but not together"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A cron expression in a time zone, a fixed interval anchored at ``anchor``, or ``@once``:
    one tick, at ``anchor`` (the DAG's start_date)."""

    cron: str | None = None
    interval: timedelta | None = None
    timezone: ZoneInfo = ZoneInfo("UTC")
    anchor: datetime = EPOCH
    once: bool = False

    @classmethod
    def parse(
        cls, value: str | timedelta, timezone: ZoneInfo, anchor: datetime | None = None
    ) -> Schedule:
        """Parse a cron string, a preset or a timedelta; ValueError says what is wrong."""
        if isinstance(value, timedelta):
            if value.total_seconds() < 1:
                raise ValueError(f"interval {value} is shorter than one second")
            return cls(interval=value, timezone=timezone, anchor=anchor or EPOCH)
        if not isinstance(value, str):
            raise ValueError(
                f"schedule must be a cron string, a preset like @daily, a timedelta or None; "
                f"got {type(value).__name__}"
            )
        if value.strip() == "@once":
            if anchor is None:
                raise ValueError(
                    "schedule '@once' needs a start_date: its one run's logical date "
                    "(the run fires when the beat first sees the DAG at or after it)"
                )
            return cls(once=True, timezone=timezone, anchor=anchor)
        expr = PRESETS.get(value.strip(), value.strip())
        if expr.startswith("@"):
            known = ", ".join(sorted([*PRESETS, "@once"]))
            raise ValueError(f"unknown preset {value!r}; known: {known}")
        if len(expr.split()) != 5 or not croniter.is_valid(expr):
            raise ValueError(f"invalid cron expression {value!r}: {cron_problem(expr)}")
        return cls(cron=expr, timezone=timezone)

    def describe(self) -> str:
        if self.once:
            return f"once at {self.anchor.isoformat()}"
        if self.interval is not None:
            return f"every {self.interval}"
        return f"{self.cron} ({self.timezone.key})"

    def next_after(self, instant: datetime) -> datetime:
        """The first tick strictly after ``instant`` (aware), as an aware UTC datetime."""
        instant = instant.astimezone(UTC)
        if self.once:
            return self.anchor if self.anchor > instant else NEVER
        if self.interval is not None:
            step = self.interval.total_seconds()
            elapsed = (instant - self.anchor).total_seconds()
            n = int(elapsed // step) + 1 if elapsed >= 0 else 0
            tick = self.anchor + timedelta(seconds=n * step)
            while tick <= instant:
                tick += self.interval
            return tick
        assert self.cron is not None
        local = instant.astimezone(self.timezone).replace(tzinfo=None)
        # Near a DST change step back one hour so a tick inside a repeated or skipped hour is
        # not missed, then walk forward (elsewhere the walk starts at ``local``: one step).
        it = croniter(self.cron, local - self._dst_margin(instant))
        while True:
            naive = it.get_next(datetime)
            tick = _localize(naive, self.timezone)
            if tick > instant:
                return tick

    def prev_at_or_before(self, instant: datetime) -> datetime | None:
        """The latest tick at or before ``instant``, or None before the anchor."""
        instant = instant.astimezone(UTC)
        if self.once:
            return self.anchor if self.anchor <= instant else None
        if self.interval is not None:
            elapsed = (instant - self.anchor).total_seconds()
            if elapsed < 0:
                return None
            return self.anchor + timedelta(
                seconds=(elapsed // self.interval.total_seconds()) * self.interval.total_seconds()
            )
        assert self.cron is not None
        local = instant.astimezone(self.timezone).replace(tzinfo=None)
        it = croniter(self.cron, local + self._dst_margin(instant) + timedelta(seconds=1))
        while True:
            naive = it.get_prev(datetime)
            tick = _localize(naive, self.timezone)
            if tick <= instant:
                return tick

    def _dst_margin(self, instant: datetime) -> timedelta:
        """One hour if the zone's UTC offset changes within an hour of ``instant``, else 0."""
        hour = timedelta(hours=1)
        offsets = {
            (instant + d).astimezone(self.timezone).utcoffset() for d in (-hour, 0 * hour, hour)
        }
        return hour if len(offsets) > 1 else timedelta(0)

    def ticks(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Ticks in ``(after, until]``, oldest first."""
        tick = self.next_after(after)
        while tick <= until and tick != NEVER:
            yield tick
            tick = self.next_after(tick)


def _localize(naive: datetime, tz: ZoneInfo) -> datetime:
    """Wall time -> UTC instant: first occurrence of a repeated time; a skipped time is shifted
    forward by the gap (fold=0 on a nonexistent time uses the offset from before the jump)."""
    return naive.replace(tzinfo=tz, fold=0).astimezone(UTC)
