"""schedule='@once': one tick, at start_date, fired once whatever catch-up says, never again once
its run exists (the watermark, or the store's latest scheduled run when Redis lost it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from beatflow import DAG, task
from beatflow.dag.schedule import Schedule
from beatflow.errors import DagDefinitionError
from beatflow.scheduler.plan import ScheduleSpec, plan_fires

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE, WINDOW = timedelta(seconds=10), timedelta(days=1)


def spec(catchup: bool = False, end: datetime | None = None) -> ScheduleSpec:
    once = Schedule.parse("@once", ZoneInfo("UTC"), anchor=START)
    return ScheduleSpec("d", once, START, end, catchup, 16)


def plan(s: ScheduleSpec, watermark: datetime | None, now: datetime):  # type: ignore[no-untyped-def]
    return plan_fires(s, watermark, now, failover_grace=GRACE, catchup_window=WINDOW, limit=10)


@pytest.mark.parametrize("catchup", [False, True])
def test_the_one_tick_fires_once_even_long_after_start_date(catchup: bool) -> None:
    long_after = START + timedelta(days=400)  # beyond the catch-up window
    first = plan(spec(catchup), None, long_after)
    assert [f.tick for f in first.fires] == [START] and first.next_due is None
    again = plan(spec(catchup), first.watermark, long_after + timedelta(days=1))
    assert again.fires == [] and again.next_due is None


def test_before_start_date_it_waits_for_it_and_after_end_date_never_fires() -> None:
    early = plan(spec(), None, START - timedelta(hours=1))
    assert early.fires == [] and early.next_due == START
    assert plan(spec(end=START - timedelta(days=1)), None, START).fires == []


def test_a_once_schedule_has_one_tick() -> None:
    s = spec().schedule
    assert list(s.ticks(START - timedelta(days=9), START + timedelta(days=9))) == [START]
    assert s.prev_at_or_before(START - timedelta(seconds=1)) is None
    assert s.describe() == "once at 2026-03-01T12:00:00+00:00"


def test_once_needs_a_start_date_and_none_is_manual() -> None:
    @task
    def t() -> None:
        return None

    with pytest.raises(DagDefinitionError, match="'@once' needs a start_date"):
        DAG("no_start", schedule="@once")
    with DAG("manual", schedule=None) as dag:
        t()
    assert dag.model.schedule is None
    assert ScheduleSpec.from_dag(dag.model) is None
