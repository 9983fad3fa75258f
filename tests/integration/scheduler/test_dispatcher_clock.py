"""The dispatcher (real Redis: due index, watermarks, fenced writes) driven by an injected clock
through both DST nights of a daily 02:30 Europe/Berlin schedule: one fire per day."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import redis

from beatflow import keys
from beatflow.dag.schedule import Schedule
from beatflow.scheduler.firing import Dispatcher
from beatflow.scheduler.plan import Fire, ScheduleSpec
from beatflow.scheduler.sync import write_entries

BERLIN = ZoneInfo("Europe/Berlin")
TOKEN = "leader-token"


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url, decode_responses=True)
    yield c
    c.close()


def run_through(client: redis.Redis, start: datetime, days: int, step: timedelta) -> list[datetime]:
    spec = ScheduleSpec("daily", Schedule.parse("30 2 * * *", BERLIN), None, None, False, 1)
    fired: list[datetime] = []

    def send(fires: Sequence[tuple[str, Fire]], epoch: int) -> None:
        assert epoch == 7
        fired.extend(f.tick for _, f in fires)

    dispatcher = Dispatcher(
        client,
        lambda *_: None,
        send,
        timedelta(seconds=10),
        timedelta(days=1),
        latest_logical_date=lambda _: None,
        paused_dag_ids=set,
        newest_epoch=lambda: 0,
        create_many=lambda *_: None,
        specs={"daily": spec},
    )
    client.set(keys.LOCK, TOKEN, px=60_000)
    client.set(keys.EPOCH, 7)
    write_entries(client, TOKEN, {"daily": spec}, start)
    now = start
    while now < start + timedelta(days=days):
        client.pexpire(keys.LOCK, 60_000)
        dispatcher.fire_due(now, (TOKEN, 7))
        now += step
    return fired


@pytest.mark.parametrize(
    "night", [datetime(2026, 3, 27, tzinfo=UTC), datetime(2026, 10, 23, tzinfo=UTC)]
)
def test_a_daily_0230_berlin_job_fires_once_per_day_across_a_dst_night(
    client: redis.Redis, night: datetime
) -> None:
    fired = run_through(client, night, days=4, step=timedelta(minutes=5))
    local_days = [t.astimezone(BERLIN).date() for t in fired]
    # the new schedule fires its latest tick (the day before) at once, then one per day
    first = (night - timedelta(days=1)).date()
    assert local_days == [first + timedelta(days=i) for i in range(5)], fired
    dst_day = fired[3].astimezone(BERLIN)
    assert dst_day.day == (29 if night.month == 3 else 25)
    # spring forward: 02:30 does not exist and fires at 03:30; fall back: at the first 02:30
    assert dst_day.strftime("%H:%M %Z") == ("03:30 CEST" if night.month == 3 else "02:30 CEST")
    assert client.hget(keys.WATERMARK, "daily") == fired[-1].isoformat()


def test_a_stale_leader_advances_nothing(client: redis.Redis) -> None:
    spec = ScheduleSpec(
        "every", Schedule.parse(timedelta(seconds=1), ZoneInfo("UTC")), None, None, False, 1
    )
    sent: list[datetime] = []
    dispatcher = Dispatcher(
        client,
        lambda *_: None,
        lambda fires, _: sent.extend(f.tick for _, f in fires),
        timedelta(seconds=10),
        timedelta(days=1),
        latest_logical_date=lambda _: None,
        paused_dag_ids=set,
        newest_epoch=lambda: 0,
        create_many=lambda *_: None,
        specs={"every": spec},
    )
    now = datetime(2026, 5, 1, 12, tzinfo=UTC)
    client.set(keys.LOCK, TOKEN, px=60_000)
    write_entries(client, TOKEN, {"every": spec}, now)
    client.set(keys.LOCK, "new-leader", px=60_000)  # our lease is gone
    result = dispatcher.fire_due(now, (TOKEN, 1))
    assert result.fenced_out
    assert client.hget(keys.WATERMARK, "every") is None
    assert sent == []  # the runs it made stay queued for the new leader; no dispatch message
