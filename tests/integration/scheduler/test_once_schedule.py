"""schedule='@once' with real beats and a worker: one run, never a second one across a beat
restart, a failover to another replica and a Redis that lost the watermark; schedule=None never
fires."""

from __future__ import annotations

import signal

import pytest

from beatflow import keys
from tests.integration.scheduler.beatcluster import BeatCluster, dag_source
from tests.procs import wait_for

pytestmark = pytest.mark.slow

ONCE_DAGS = """
from datetime import datetime
from beatflow import DAG, task

@task
def noop() -> int:
    return 1

with DAG("beat_once", schedule="@once", start_date=datetime(2026, 1, 1)):
    noop()

with DAG("beat_manual", schedule=None, start_date=datetime(2026, 1, 1)):
    noop()
"""


def test_once_fires_one_run_across_restarts_failovers_and_a_lost_watermark(
    cluster: BeatCluster,
) -> None:
    (cluster.dags / "once.py").write_text(ONCE_DAGS)
    # a DAG ticking every second shows that the beats keep firing while @once stays quiet
    (cluster.dags / "beat_every_second.py").write_text(dag_source("beat_every_second"))
    cluster.start_worker()
    first = cluster.start_beat("a")
    cluster.wait_leader()
    [run] = cluster.wait_runs("beat_once", 1)
    assert (
        run.run_id == "scheduled__2026-01-01T00:00:00.000000+00:00" and run.trigger == "scheduled"
    )
    wait_for(
        lambda: cluster.store.get_dag_run("beat_once", run.run_id).state == "success",  # type: ignore[union-attr]
        timeout=60,
        message="the @once run to succeed",
    )
    # a restart, then a failover to a second replica after Redis lost the watermark
    first.stop()
    cluster.client.hdel(keys.WATERMARK, "beat_once")
    second = cluster.start_beat("b")
    cluster.start_beat("c")
    cluster.wait_leader({"b", "c"})
    ticks = len(cluster.runs("beat_every_second"))
    cluster.wait_runs("beat_every_second", ticks + 3)
    second.signal(signal.SIGTERM)
    cluster.client.hdel(keys.WATERMARK, "beat_once")
    cluster.wait_leader({"c"}, timeout=60)
    ticks = len(cluster.runs("beat_every_second"))
    cluster.wait_runs("beat_every_second", ticks + 3)
    assert [r.run_id for r in cluster.runs("beat_once")] == [run.run_id], cluster.logs()
    assert cluster.runs("beat_manual") == []


PAUSED_ONCE = """
from datetime import datetime
from beatflow import DAG, task

@task
def noop() -> int:
    return 1

with DAG("beat_once_paused", schedule="@once", start_date=datetime(2026, 1, 1), catchup=False):
    noop()
"""


def test_a_once_dag_paused_at_its_tick_runs_once_unpaused(cluster: BeatCluster) -> None:
    cluster.store.set_paused("beat_once_paused", True)
    (cluster.dags / "once_paused.py").write_text(PAUSED_ONCE)
    (cluster.dags / "beat_every_second.py").write_text(dag_source("beat_every_second"))
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.wait_leader()
    cluster.wait_runs("beat_every_second", 3)  # the beat looked at the paused entry
    assert cluster.runs("beat_once_paused") == []
    cluster.store.set_paused("beat_once_paused", False)
    [run] = cluster.wait_runs("beat_once_paused", 1, timeout=60)
    ticks = len(cluster.runs("beat_every_second"))
    cluster.wait_runs("beat_every_second", ticks + 3)
    assert [r.run_id for r in cluster.runs("beat_once_paused")] == [run.run_id]
