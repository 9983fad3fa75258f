"""An Airflow DAG file, unchanged, scheduled by beatflow's HA beat: two real beat replicas and a
real worker; the leader is SIGKILLed and the standby goes on, every tick fired once."""

from __future__ import annotations

import signal

import pytest

from tests.integration.scheduler.beatcluster import BeatCluster, cluster
from tests.procs import wait_for

pytestmark = pytest.mark.slow
__all__ = ["cluster"]  # the fixture

AIRFLOW_DAG = """
import pendulum
from airflow.sdk import dag, task
from airflow.providers.standard.operators.bash import BashOperator


@dag(
    schedule=pendulum.duration(seconds=1),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=10000,
    tags=["airflow"],
)
def af_every_second():
    @task
    def stamp(ds=None, ts=None):
        return ts

    echo = "echo {{ ti.xcom_pull(task_ids='stamp') }}"
    stamp() >> BashOperator(task_id="echo", bash_command=echo)


af_every_second()
"""


def test_an_airflow_dag_is_fired_by_the_ha_beat_once_per_tick_across_a_leader_sigkill(
    cluster: BeatCluster,
) -> None:
    (cluster.dags / "af_every_second.py").write_text(AIRFLOW_DAG)
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.start_beat("b")
    leader = cluster.wait_leader()
    cluster.wait_runs("af_every_second", 3)
    next(b for b in cluster.beats if b.name == leader).signal(signal.SIGKILL)
    cluster.wait_leader({"a", "b"} - {leader}, timeout=60)
    before = len(cluster.runs("af_every_second"))
    cluster.wait_runs("af_every_second", before + 3, timeout=60)
    for beat in cluster.beats:
        beat.stop()
    runs = cluster.runs("af_every_second")
    per_date = cluster.runs_per_logical_date("af_every_second")
    assert all(n == 1 for n in per_date.values()), f"a tick fired twice: {per_date}"
    dates = sorted(per_date)
    gaps = [(a, b) for a, b in zip(dates, dates[1:], strict=False) if (b - a).total_seconds() != 1]
    assert not gaps, f"ticks lost between: {gaps}\n{cluster.logs()}"
    wait_for(
        lambda: all(r.state in ("success", "failed") for r in cluster.runs("af_every_second")),
        timeout=60,
        message="every fired run to end",
    )
    ended = cluster.runs("af_every_second")
    assert {r.state for r in ended} == {"success"}, cluster.logs()
    one = ended[0]
    tasks = {t.task_id: t for t in cluster.store.get_task_runs("af_every_second", one.run_id)}
    assert tasks["echo"].result == tasks["stamp"].result == one.logical_date.isoformat()
    assert len(runs) >= 6
