"""Plain Celery periodic tasks on the HA beat, through RedBeat's own entries: one declared in
``beat_schedule`` by a BEATFLOW_IMPORTS module and one saved at runtime with
``RedBeatSchedulerEntry(...).save()`` fire under the leader's lock and epoch, each advance sent
once (across a leader kill too), show in `beat status`, and stop when removed. DAG entries are
readable by RedBeat's ``from_key``; a saved entry never makes the beat spin."""

from __future__ import annotations

import signal
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from celery.schedules import schedule
from redbeat.schedulers import RedBeatSchedulerEntry

from beatflow import keys
from beatflow.app import create_app
from beatflow.scheduler.beat import BeatflowScheduler
from tests.integration.scheduler.beatcluster import BeatCluster, beat_cluster
from tests.procs import wait_for

pytestmark = pytest.mark.slow

PERIODIC = textwrap.dedent(
    """
    import os
    from pathlib import Path

    from celery import shared_task

    MARKS = Path(os.environ["BEATFLOW_TEST_MARKS"])


    @shared_task(name="periodic.touch")
    def touch(name: str) -> None:
        MARKS.mkdir(parents=True, exist_ok=True)
        with open(MARKS / name, "a") as f:
            f.write("x")


    beat_schedule = {
        "declared-touch": {"task": "periodic.touch", "schedule": 1.0, "args": ["declared"]},
    }
    """
)


@pytest.fixture
def cluster(
    redis_url: str, make_postgres_db: Callable[[], str], tmp_path: Path
) -> Iterator[BeatCluster]:
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "periodic.py").write_text(PERIODIC)
    env = {"BEATFLOW_IMPORTS": "periodic", "BEATFLOW_TEST_MARKS": str(tmp_path / "marks")}
    with beat_cluster(tmp_path, redis_url, make_postgres_db(), **env) as c:
        yield c


def runs(cluster: BeatCluster, name: str) -> int:
    path = cluster.tmp / "marks" / name
    return len(path.read_text()) if path.exists() else 0


def sent(cluster: BeatCluster, name: str) -> int:
    """How many times the beat advanced the entry (RedBeat's total_run_count)."""
    meta = cluster.client.hget(keys.REDBEAT_PREFIX + name, "meta")
    return int(RedBeatSchedulerEntry.decode_meta(meta).get("total_run_count") or 0)


def test_declared_and_runtime_entries_fire_once_per_advance_across_a_leader_kill(
    cluster: BeatCluster,
) -> None:
    cluster.write_dag("periodic_dag")
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.start_beat("b")
    leader = cluster.wait_leader(timeout=60)
    wait_for(lambda: runs(cluster, "declared") >= 2, timeout=60, message="declared task runs")

    app = create_app(cluster.settings, load_dags=False)
    try:
        entry = RedBeatSchedulerEntry(
            "runtime-touch", "periodic.touch", schedule(1.0), args=["runtime"], app=app
        ).save()
        wait_for(lambda: runs(cluster, "runtime") >= 2, timeout=60, message="runtime task runs")
        # RedBeat's own reader reads every entry, DAG entries included (disabled for RedBeat)
        dag_entry = RedBeatSchedulerEntry.from_key(keys.entry_key("periodic_dag"), app=app)
        assert dag_entry.task == "beatflow.fire_schedule" and dag_entry.enabled is False
        status = cluster.status()
        assert {"declared-touch", "runtime-touch"} <= {
            d.get("name") for d in status.next_due if d["kind"] == "task"
        } or status.entries >= 3

        # the leader dies; the standby goes on with both entries
        proc = next(b for b in cluster.beats if b.name == leader)
        proc.signal(signal.SIGKILL)
        cluster.wait_leader({"a", "b"} - {leader}, timeout=60)
        before = runs(cluster, "declared")
        wait_for(lambda: runs(cluster, "declared") >= before + 3, timeout=60, message="runs")

        # removing the runtime entry stops it
        entry.delete()
        stopped = runs(cluster, "runtime")
        mark = runs(cluster, "declared")
        wait_for(lambda: runs(cluster, "declared") >= mark + 3, timeout=60, message="runs")
        assert runs(cluster, "runtime") <= stopped + 1  # at most one already in flight
    finally:
        app.close()
    # every advance the beats made was sent and run exactly once, across the kill
    for beat in cluster.beats:
        beat.stop()
    wait_for(
        lambda: runs(cluster, "declared") == sent(cluster, "declared-touch") or None,
        timeout=60,
        message="the declared task's runs to match the beat's advances",
    )


def test_a_saved_redbeat_entry_never_makes_the_beat_spin(cluster: BeatCluster) -> None:
    app = create_app(cluster.settings, load_dags=False)
    try:
        RedBeatSchedulerEntry(
            "paused-touch",
            "periodic.touch",
            schedule(1.0),
            args=["paused"],
            app=app,
            enabled=False,
        ).save()
        beat = BeatflowScheduler(app=app)
        try:
            waits = [beat.tick() for _ in range(5)]
        finally:
            beat.close()
    finally:
        app.close()
    assert min(waits[1:]) >= 0.1, waits  # the loop interval, not 5 ms forever
    assert runs(cluster, "paused") == 0


def test_a_tick_after_the_scheduler_closed_ends_the_beat_loop(cluster: BeatCluster) -> None:
    # Celery's SIGTERM handler closes the scheduler, then raises SystemExit in the loop; should
    # the call the loop was in swallow it, the next tick must end the loop (a beat that ran on
    # as a lockless follower never exited: seen once in CI, the standby had taken over)
    app = create_app(cluster.settings, load_dags=False)
    try:
        beat = BeatflowScheduler(app=app)
        beat.tick()
        beat.close()
        with pytest.raises(SystemExit):
            beat.tick()
    finally:
        app.close()
