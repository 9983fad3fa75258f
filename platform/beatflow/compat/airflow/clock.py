"""Operators that branch on the clock, as Airflow's standard provider has them:
``LatestOnlyOperator``, ``BranchDayOfWeekOperator`` (and ``WeekDay``), ``BranchDateTimeOperator``.
Each is a beatflow branch task: its result is the list of direct downstream ids to follow."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, time
from typing import Any

from beatflow.compat.airflow.operators import BaseOperator
from beatflow.dag.flow import BRANCH


class WeekDay(enum.IntEnum):
    """``airflow.providers.standard.utils.weekday.WeekDay``."""

    MONDAY = 1
    TUESDAY = 2
    WEDNESDAY = 3
    THURSDAY = 4
    FRIDAY = 5
    SATURDAY = 6
    SUNDAY = 7

    @classmethod
    def get_weekday_number(cls, week_day_str: str) -> int:
        return int(cls[week_day_str.upper()])

    @classmethod
    def convert(cls, day: str | WeekDay) -> int:
        return int(day) if isinstance(day, WeekDay) else cls.get_weekday_number(day)

    @classmethod
    def validate_week_day(cls, week_day: Any) -> set[int]:
        days = [week_day] if isinstance(week_day, str | WeekDay) else list(week_day)
        return {cls.convert(d) for d in days}

    def __eq__(self, other: object) -> bool:  # Airflow compares with lower-case day names
        if isinstance(other, str):
            return self.name.lower() == other.lower()
        return int(self) == other

    def __hash__(self) -> int:
        return int(self)


def _ids(value: str | Iterable[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


class _ClockBranch(BaseOperator):
    control = BRANCH

    def __init__(
        self,
        *,
        follow_task_ids_if_true: str | Iterable[str] = (),
        follow_task_ids_if_false: str | Iterable[str] = (),
        use_task_logical_date: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.if_true = _ids(follow_task_ids_if_true)
        self.if_false = _ids(follow_task_ids_if_false)
        self.use_task_logical_date = use_task_logical_date

    def now(self, context: Mapping[str, Any]) -> datetime:
        if self.use_task_logical_date:
            return context["logical_date"]  # type: ignore[no-any-return]
        return datetime.now(UTC)

    def test(self, at: datetime) -> bool:
        raise NotImplementedError

    def execute(self, context: Mapping[str, Any]) -> list[str]:
        return self.if_true if self.test(self.now(context)) else self.if_false


class BranchDayOfWeekOperator(_ClockBranch):
    """Follow ``follow_task_ids_if_true`` on the given week day(s)."""

    def __init__(self, *, week_day: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.week_days = WeekDay.validate_week_day(week_day)

    def test(self, at: datetime) -> bool:
        return at.isoweekday() in self.week_days


class BranchDateTimeOperator(_ClockBranch):
    """Follow ``follow_task_ids_if_true`` between ``target_lower`` and ``target_upper``
    (datetimes, or times of day; a lower time after the upper one spans midnight)."""

    def __init__(
        self,
        *,
        target_lower: datetime | time | None = None,
        target_upper: datetime | time | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.lower, self.upper = target_lower, target_upper

    def test(self, at: datetime) -> bool:
        lower, upper = self.lower, self.upper
        if isinstance(lower, datetime) or isinstance(upper, datetime):
            lo = lower if isinstance(lower, datetime) else None
            hi = upper if isinstance(upper, datetime) else None
            at_naive = at.astimezone(UTC).replace(tzinfo=None)

            def naive(v: datetime) -> datetime:
                return v.astimezone(UTC).replace(tzinfo=None) if v.tzinfo else v

            return (lo is None or naive(lo) <= at_naive) and (hi is None or at_naive <= naive(hi))
        now = at.astimezone(UTC).time().replace(tzinfo=None)
        lo_t = lower.replace(tzinfo=None) if isinstance(lower, time) else time.min
        hi_t = upper.replace(tzinfo=None) if isinstance(upper, time) else time.max
        if lo_t <= hi_t:
            return lo_t <= now <= hi_t
        return now >= lo_t or now <= hi_t


class LatestOnlyOperator(BaseOperator):
    """Follow every direct downstream task on a manual run or the run of the latest tick; skip
    them on an older (caught-up) run."""

    control = BRANCH

    def execute(self, context: Mapping[str, Any]) -> list[str]:
        downstream = sorted(self.dag.model.downstream_map()[self.task_id])
        schedule = self.dag.model.schedule
        if context["dag_run"].run_type == "manual" or schedule is None:
            return downstream
        now = datetime.now(UTC)
        logical: datetime = context["logical_date"]
        end = schedule.next_after(logical)
        latest = end >= now or schedule.next_after(end) > now
        return downstream if latest else []
