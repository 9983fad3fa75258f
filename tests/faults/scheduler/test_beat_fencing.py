"""Leader writes are fenced by the leader epoch where they land. A leader frozen (SIGSTOP) for
three lock timeouts loses the lock to the standby; when it wakes up (SIGCONT) it may still hold
fires it planned before the freeze: the results DB refuses its runs and Redis its watermarks,
and workers refuse its fire messages. Every tick fires once; nothing of the old epoch lands after
the new epoch began."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import redis

from beatflow import keys
from beatflow.dag.schedule import Schedule
from beatflow.errors import StaleLeaderError
from beatflow.scheduler.firing import Dispatcher
from beatflow.scheduler.plan import Fire, ScheduleSpec
from beatflow.scheduler.sync import write_entries
from beatflow.store import Store
from beatflow.store.records import ScheduledRunDraft
from tests.integration.scheduler.beatcluster import BeatCluster, cluster
from tests.integration.scheduler.test_beat_replicas import assert_every_tick_once

pytestmark = pytest.mark.slow
__all__ = ["cluster"]  # the fixture

DAGS = [f"fence_{i:02d}" for i in range(12)]  # a busy tick: a freeze often lands inside one


def test_a_frozen_leader_that_wakes_up_writes_nothing_and_every_tick_fires_once(
    cluster: BeatCluster,
) -> None:
    for dag in DAGS:
        cluster.write_dag(dag)
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.start_beat("b")
    leader = cluster.wait_leader()
    cluster.wait_runs(DAGS[-1], 3, timeout=60)
    frozen = next(b for b in cluster.beats if b.name == leader)
    standby = ({"a", "b"} - {leader}).pop()
    frozen.signal(signal.SIGSTOP)
    try:
        cluster.wait_leader({standby}, timeout=60)
        # stay frozen for three lock timeouts while the new leader fires
        taken = len(cluster.runs(DAGS[0]))
        cluster.wait_runs(DAGS[0], taken + 3 * int(cluster.settings.beat_lock_timeout), timeout=60)
    finally:
        frozen.signal(signal.SIGCONT)
    resumed = len(cluster.runs(DAGS[0]))
    cluster.wait_runs(DAGS[0], resumed + 4, timeout=60)
    assert cluster.leader() == standby
    assert cluster.store.epoch_floor() == 2
    for dag in DAGS:
        assert_every_tick_once(cluster, dag)
    runs = [r for dag in DAGS for r in cluster.runs(dag)]
    assert {r.leader_epoch for r in runs} <= {1, 2}
    new_term = min(r.queued_at for r in runs if r.leader_epoch == 2)
    late = [r for r in runs if r.leader_epoch == 1 and r.queued_at >= new_term]
    assert not late, f"runs of the old epoch created after the new one began: {late}"


def test_a_leader_deposed_in_the_middle_of_a_tick_has_its_runs_and_watermarks_refused(
    redis_url: str, make_postgres_db: Callable[[], str]
) -> None:
    """Deterministic: the old leader pauses between planning and creating its runs (a GC pause,
    a VM freeze), a new leader takes the lock and records its epoch; the old one resumes."""
    store = Store(make_postgres_db())
    store.upgrade()
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    spec = ScheduleSpec(
        "fenced", Schedule.parse(timedelta(minutes=1), ZoneInfo("UTC")), None, None, False, 1
    )
    now = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
    paused, resume = threading.Event(), threading.Event()
    sent: list[tuple[str, Fire]] = []

    def create(dag_id: str, fire: Fire, epoch: int) -> None:  # the DAG-by-DAG fallback
        paused.set()
        resume.wait(30)  # frozen here while the standby takes over
        store.create_fenced_dag_run(
            dag_id,
            f"scheduled__{fire.tick.isoformat()}",
            logical_date=fire.tick,
            trigger=fire.trigger,
            conf={},
            leader_epoch=epoch,
        )

    def create_many(fires: Sequence[tuple[str, Fire]], epoch: int) -> None:
        paused.set()
        resume.wait(30)  # frozen here while the standby takes over
        drafts = [
            ScheduledRunDraft(d, f"scheduled__{f.tick.isoformat()}", f.tick, f.trigger, {})
            for d, f in fires
        ]
        store.create_fenced_dag_runs(drafts, leader_epoch=epoch)

    old = Dispatcher(
        client,
        create,
        lambda fires, _: sent.extend(fires),
        timedelta(seconds=10),
        timedelta(days=1),
        latest_logical_date=lambda _: None,
        paused_dag_ids=set,
        newest_epoch=store.epoch_floor,
        create_many=create_many,
        specs={"fenced": spec},
    )
    try:
        client.set(keys.LOCK, "old-token", px=60_000)
        client.set(keys.EPOCH, 1)
        store.raise_epoch_floor(1)
        write_entries(client, "old-token", {"fenced": spec}, now)
        result: list[object] = []
        worker = threading.Thread(target=lambda: result.append(old.fire_due(now, ("old-token", 1))))
        worker.start()
        assert paused.wait(30)
        # the standby wins: a new token and epoch in Redis, its epoch recorded in the DB
        client.set(keys.LOCK, "new-token", px=60_000)
        client.set(keys.EPOCH, 2)
        assert store.raise_epoch_floor(2) == 2
        resume.set()
        worker.join(30)
        (outcome,) = result
        assert outcome.fenced_out  # type: ignore[attr-defined]
        assert store.list_dag_runs("fenced") == []  # refused where it lands: the results DB
        assert client.hget(keys.WATERMARK, "fenced") is None  # and Redis
        assert sent == []
        with pytest.raises(StaleLeaderError):
            store.create_fenced_dag_run(
                "fenced",
                "scheduled__x",
                logical_date=now,
                trigger="scheduled",
                conf={},
                leader_epoch=1,
            )
    finally:
        client.close()
        store.close()
