"""plan_fires: which ticks fire, given the watermark, now, catch-up and end_date."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from beatflow.dag.schedule import Schedule
from beatflow.scheduler.plan import ScheduleSpec, plan_fires

UTCZ = ZoneInfo("UTC")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=10)
WINDOW = timedelta(days=1)


def spec(
    catchup: bool = False,
    every: timedelta = timedelta(minutes=1),
    start: datetime | None = None,
    end: datetime | None = None,
) -> ScheduleSpec:
    return ScheduleSpec("d", Schedule.parse(every, UTCZ, anchor=start), start, end, catchup, 16)


def ticks(plan_: object) -> list[datetime]:
    return [f.tick for f in plan_.fires]  # type: ignore[attr-defined]


def test_a_new_dag_without_start_date_fires_only_its_latest_tick() -> None:
    plan = plan_fires(
        spec(catchup=True),
        None,
        T0 + timedelta(seconds=30),
        failover_grace=GRACE,
        catchup_window=WINDOW,
        limit=100,
    )
    assert ticks(plan) == [T0]
    assert plan.watermark == T0
    assert plan.next_due == T0 + timedelta(minutes=1)


def test_catchup_true_fires_every_missed_tick_oldest_first() -> None:
    plan = plan_fires(
        spec(catchup=True),
        T0,
        T0 + timedelta(minutes=5, seconds=1),
        failover_grace=GRACE,
        catchup_window=WINDOW,
        limit=100,
    )
    assert ticks(plan) == [T0 + timedelta(minutes=i) for i in range(1, 6)]
    assert [f.trigger for f in plan.fires] == ["catchup"] * 4 + ["scheduled"]


def test_catchup_false_fires_only_the_latest_missed_tick() -> None:
    plan = plan_fires(
        spec(catchup=False),
        T0,
        T0 + timedelta(minutes=5, seconds=30),
        failover_grace=GRACE,
        catchup_window=WINDOW,
        limit=100,
    )
    assert ticks(plan) == [T0 + timedelta(minutes=5)]
    assert plan.watermark == T0 + timedelta(minutes=5)


def test_ticks_of_a_failover_gap_fire_even_without_catchup() -> None:
    every = timedelta(seconds=1)
    plan = plan_fires(
        spec(catchup=False, every=every),
        T0,
        T0 + timedelta(seconds=4.2),
        failover_grace=GRACE,
        catchup_window=WINDOW,
        limit=100,
    )
    assert ticks(plan) == [T0 + timedelta(seconds=i) for i in range(1, 5)]


def test_catchup_starts_at_start_date_and_stays_inside_the_catchup_window() -> None:
    start = T0 - timedelta(minutes=3)
    plan = plan_fires(
        spec(catchup=True, start=start),
        None,
        T0,
        failover_grace=GRACE,
        catchup_window=WINDOW,
        limit=100,
    )
    assert ticks(plan) == [start + timedelta(minutes=i) for i in range(4)]
    old = T0 - timedelta(days=3)
    plan = plan_fires(
        spec(catchup=True, start=old),
        None,
        T0,
        failover_grace=GRACE,
        catchup_window=timedelta(minutes=2),
        limit=100,
    )
    assert ticks(plan) == [T0 - timedelta(minutes=2), T0 - timedelta(minutes=1), T0]


def test_the_budget_bounds_one_call_and_leaves_the_rest_due() -> None:
    plan = plan_fires(
        spec(catchup=True),
        T0,
        T0 + timedelta(minutes=10),
        failover_grace=GRACE,
        catchup_window=WINDOW,
        limit=3,
    )
    assert ticks(plan) == [T0 + timedelta(minutes=i) for i in (1, 2, 3)]
    assert plan.watermark == T0 + timedelta(minutes=3)
    assert plan.next_due == T0 + timedelta(minutes=10)
    rest = plan_fires(
        spec(catchup=True),
        plan.watermark,
        T0 + timedelta(minutes=10),
        failover_grace=GRACE,
        catchup_window=WINDOW,
        limit=100,
    )
    assert ticks(rest) == [T0 + timedelta(minutes=i) for i in range(4, 11)]


def test_nothing_fires_before_start_date_or_after_end_date() -> None:
    future = T0 + timedelta(hours=1)
    plan = plan_fires(
        spec(start=future), None, T0, failover_grace=GRACE, catchup_window=WINDOW, limit=100
    )
    assert plan.fires == [] and plan.next_due == future
    end = T0 + timedelta(minutes=2)
    plan = plan_fires(
        spec(catchup=True, end=end),
        T0,
        T0 + timedelta(hours=1),
        failover_grace=GRACE,
        catchup_window=WINDOW,
        limit=100,
    )
    assert ticks(plan) == [T0 + timedelta(minutes=1), end]
    assert plan.next_due is None


def test_a_tick_at_or_before_the_watermark_never_fires_again() -> None:
    plan = plan_fires(
        spec(catchup=True),
        T0,
        T0 + timedelta(seconds=59),
        failover_grace=GRACE,
        catchup_window=WINDOW,
        limit=100,
    )
    assert plan.fires == []
    assert plan.next_due == T0 + timedelta(minutes=1)
