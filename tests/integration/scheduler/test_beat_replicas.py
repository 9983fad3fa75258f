"""Real `celery -A beatflow beat` replicas with a real worker: only the leader fires, every tick
once; SIGTERM hands over at once; catch-up after an outage; pause; schedule sync without restart."""

from __future__ import annotations

import math
import signal
import time
from datetime import datetime, timedelta

import pytest

from beatflow import keys
from tests.integration.scheduler.beatcluster import BeatCluster
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def assert_every_tick_once(cluster: BeatCluster, dag_id: str, step: float = 1.0) -> list[datetime]:
    per_date = cluster.runs_per_logical_date(dag_id)
    doubles = {d: n for d, n in per_date.items() if n > 1}
    assert not doubles, f"ticks with more than one DAG run: {doubles}\n{cluster.logs()}"
    dates = sorted(per_date)
    gaps = [
        (a, b) for a, b in zip(dates, dates[1:], strict=False) if (b - a).total_seconds() != step
    ]
    assert not gaps, f"ticks lost between: {gaps}\n{cluster.logs()}"
    return dates


def test_two_replicas_fire_every_tick_exactly_once_and_only_the_leader_fires(
    cluster: BeatCluster,
) -> None:
    cluster.write_dag("beat_every_second")
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.start_beat("b")
    leader = cluster.wait_leader()
    cluster.wait_runs("beat_every_second", 12)
    dates = assert_every_tick_once(cluster, "beat_every_second")
    assert len(dates) >= 12
    epochs = {r.leader_epoch for r in cluster.runs("beat_every_second")}
    assert epochs == {1}, f"runs fired by more than one leader: {epochs}"
    follower = next(b for b in cluster.beats if b.name != leader)
    assert "fired" not in follower.log()
    assert cluster.leader() == leader


def test_sigterm_releases_the_lock_at_once_and_the_standby_takes_over_with_no_tick_lost(
    cluster: BeatCluster,
) -> None:
    cluster.write_dag("beat_every_second")
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.start_beat("b")
    leader = cluster.wait_leader()
    cluster.wait_runs("beat_every_second", 3)
    proc = next(b for b in cluster.beats if b.name == leader)
    proc.signal(signal.SIGTERM)
    standby = ({"a", "b"} - {leader}).pop()
    cluster.wait_leader({standby}, timeout=60)
    assert proc.popen is not None and proc.popen.wait(60) == 0
    # the lock was released (not left to expire), then the standby won the next epoch
    assert "released the lock" in proc.log()
    assert cluster.status().epoch == 2
    count = len(cluster.runs("beat_every_second"))
    cluster.wait_runs("beat_every_second", count + 3)
    assert_every_tick_once(cluster, "beat_every_second")


@pytest.mark.parametrize("catchup", [True, False])
def test_a_beat_outage_is_caught_up_oldest_first_or_only_the_latest_tick_without_catchup(
    cluster: BeatCluster, catchup: bool
) -> None:
    # Start the beats' clock 2 s past a minute, so the real seconds this test takes never carry
    # it across one more minutely tick than the five-minute outage below.
    now = time.time()
    cluster.shift_clock(math.ceil(now / 60) * 60 + 2 - now)
    cluster.write_dag("beat_minutely", schedule="timedelta(minutes=1)", catchup=catchup)
    cluster.start_worker()
    beat = cluster.start_beat("a")
    first = cluster.wait_runs("beat_minutely", 1)[0]
    beat.stop()
    cluster.shift_clock(5 * 60 + 1)  # the beat was down for five minutes
    cluster.start_beat("a2")
    expected = 6 if catchup else 2
    runs = cluster.wait_runs("beat_minutely", expected)
    dates = sorted(r.logical_date for r in runs if r.logical_date)
    assert first.logical_date is not None
    if catchup:
        assert dates == [first.logical_date + timedelta(minutes=i) for i in range(6)]
        # runs are listed newest queued first, and of those queued in one insert (the beat
        # creates a tick's runs in one) the last inserted first: reversed, in creation order
        caught = [r for r in reversed(runs) if r.trigger == "catchup"]
        assert [r.logical_date for r in caught] == dates[1:5]  # oldest first
    else:
        assert dates == [first.logical_date, first.logical_date + timedelta(minutes=5)]
    wait_for(
        lambda: cluster.client.hget(keys.WATERMARK, "beat_minutely") == dates[-1].isoformat(),
        timeout=60,
        message="the watermark to reach the last tick",
    )
    assert len(cluster.runs("beat_minutely")) == expected


def test_pause_stops_every_replica_survives_a_restart_and_unpause_resumes(
    cluster: BeatCluster,
) -> None:
    cluster.write_dag("beat_every_second")
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.start_beat("b")
    cluster.wait_leader()
    cluster.wait_runs("beat_every_second", 2)
    cluster.store.set_paused("beat_every_second", True)
    paused_at = time.time()
    for beat in list(cluster.beats):
        beat.stop()
    cluster.beats.clear()
    cluster.start_beat("c")
    cluster.start_beat("d")
    cluster.wait_leader({"c", "d"})
    # the new leader has looked at the entry at least three ticks after the pause
    wait_for(
        lambda: (
            (cluster.client.zscore(keys.SCHEDULE, keys.entry_key("beat_every_second")) or 0)
            > paused_at + 3
        ),
        timeout=60,
        message="three paused ticks",
    )
    during = [
        r
        for r in cluster.runs("beat_every_second")
        if r.logical_date and r.logical_date.timestamp() > paused_at + 0.5
    ]
    assert during == [], f"runs fired while paused: {[r.run_id for r in during]}"
    count = len(cluster.runs("beat_every_second"))
    cluster.store.set_paused("beat_every_second", False)
    cluster.wait_runs("beat_every_second", count + 2)
    per_date = cluster.runs_per_logical_date("beat_every_second")
    assert max(per_date.values()) == 1


def test_schedule_sync_reflects_new_changed_deleted_and_broken_dags_without_a_restart(
    cluster: BeatCluster,
) -> None:
    cluster.write_dag("beat_sync_a", schedule="timedelta(seconds=30)")
    beat = cluster.start_beat("a")
    cluster.wait_leader()

    def definition(dag_id: str) -> str | None:
        return cluster.client.hget(keys.entry_key(dag_id), keys.SPEC_FIELD)  # type: ignore[return-value]

    wait_for(lambda: definition("beat_sync_a"), timeout=60, message="entry of beat_sync_a")
    cluster.write_dag("beat_sync_b", schedule="'*/5 * * * *'", extra=", timezone='Asia/Tokyo'")
    wait_for(lambda: definition("beat_sync_b"), timeout=60, message="entry of a new DAG")
    assert "Asia/Tokyo" in (definition("beat_sync_b") or "")
    cluster.write_dag("beat_sync_a", schedule="timedelta(seconds=45)")
    wait_for(
        lambda: "0:00:45" in (definition("beat_sync_a") or ""),
        timeout=60,
        message="the changed schedule",
    )
    (cluster.dags / "beat_sync_b.py").unlink()
    wait_for(lambda: definition("beat_sync_b") is None, timeout=60, message="deleted entry")
    assert cluster.client.zscore(keys.SCHEDULE, keys.entry_key("beat_sync_b")) is None
    (cluster.dags / "beat_sync_a.py").write_text("this is not python\n")
    wait_for(lambda: definition("beat_sync_a") is None, timeout=60, message="broken entry off")
    assert beat.popen is not None and beat.popen.poll() is None
    assert "does not load" in beat.log()
    cluster.write_dag("beat_sync_a", schedule="timedelta(seconds=45)")
    wait_for(lambda: definition("beat_sync_a"), timeout=60, message="fixed DAG back")
    assert cluster.status().entries == 1
