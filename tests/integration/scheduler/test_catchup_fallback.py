"""When Redis has lost the watermarks, the beat resumes after the latest *scheduled* run in the
results DB: a manual run (whose logical date is the trigger time) must not hide missed ticks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import redis

from beatflow import keys
from beatflow.dag.schedule import Schedule
from beatflow.scheduler.firing import Dispatcher
from beatflow.scheduler.plan import Fire, ScheduleSpec
from beatflow.scheduler.sync import write_entries
from beatflow.store import Store


def test_missed_ticks_after_the_last_scheduled_run_fire_though_a_manual_run_is_newer(
    redis_url: str, make_postgres_db: Callable[[], str]
) -> None:
    store = Store(make_postgres_db())
    store.upgrade()
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    hourly = Schedule.parse("0 * * * *", ZoneInfo("UTC"))
    spec = ScheduleSpec("hourly", hourly, None, None, True, 1)
    now = datetime(2026, 6, 1, 12, 30, tzinfo=UTC)
    last = datetime(2026, 6, 1, 9, tzinfo=UTC)
    store.create_dag_run("hourly", "scheduled__9", logical_date=last, trigger="scheduled")
    store.create_dag_run("hourly", "manual__1230", logical_date=now, trigger="manual")
    made: list[datetime] = []

    def create(dag_id: str, fire: Fire, epoch: int) -> None:
        made.append(fire.tick)

    def create_many(fires: Sequence[tuple[str, Fire]], epoch: int) -> None:
        made.extend(f.tick for _, f in fires)

    dispatcher = Dispatcher(
        client,
        create,
        lambda *_: None,
        timedelta(seconds=10),
        timedelta(days=1),
        latest_logical_date=store.latest_scheduled_logical_date,
        paused_dag_ids=set,
        newest_epoch=store.epoch_floor,
        create_many=create_many,
        specs={"hourly": spec},
    )
    try:
        client.set(keys.LOCK, "t", px=60_000)
        client.set(keys.EPOCH, 1)
        client.hdel(keys.WATERMARK, "hourly")  # Redis lost it
        write_entries(client, "t", {"hourly": spec}, now)
        dispatcher.fire_due(now, ("t", 1))
        assert made == [last + timedelta(hours=h) for h in (1, 2, 3)]
        assert store.latest_scheduled_logical_date("hourly") == last
    finally:
        client.close()
        store.close()
