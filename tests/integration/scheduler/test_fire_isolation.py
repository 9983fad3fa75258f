"""Fires are isolated per DAG and never silently dropped: a DAG that cannot run (a required param
without a default) gets failed runs with their reason while the other DAGs' ticks all fire; a
DAG the workers have not loaded yet keeps its runs (queued) until a worker that knows it comes."""

from __future__ import annotations

import pytest

from beatflow.states import DagRunState
from tests.integration.scheduler.beatcluster import BeatCluster
from tests.integration.scheduler.test_beat_replicas import assert_every_tick_once
from tests.procs import wait_for

pytestmark = pytest.mark.slow

NEEDS_CONF = ', params={"customer": Param(type=str, required=True)}'


def test_a_dag_whose_scheduled_run_cannot_start_gets_failed_runs_and_others_lose_no_tick(
    cluster: BeatCluster,
) -> None:
    cluster.write_dag("fire_good")
    cluster.write_dag("fire_bad", extra=NEEDS_CONF)
    source = (cluster.dags / "fire_bad.py").read_text()
    (cluster.dags / "fire_bad.py").write_text(source.replace("import DAG,", "import DAG, Param,"))
    cluster.start_worker()
    cluster.start_beat("a")
    cluster.wait_runs("fire_bad", 3)
    cluster.wait_runs("fire_good", 6)
    bad = cluster.runs("fire_bad")
    assert {r.state for r in bad} == {DagRunState.FAILED}, bad
    assert all(r.failure_reason and '"customer" is required' in r.failure_reason for r in bad)
    assert_every_tick_once(cluster, "fire_bad")
    assert_every_tick_once(cluster, "fire_good")
    wait_for(
        lambda: any(r.state == DagRunState.SUCCESS for r in cluster.runs("fire_good")),
        message="a run of the good DAG to succeed",
    )


def test_a_dag_the_worker_has_not_loaded_keeps_its_runs_until_a_worker_knows_it(
    cluster: BeatCluster,
) -> None:
    # a worker that cannot know the DAG: its dags folder is another, empty one (a worker picks
    # up new files of its own folder by itself: tests/integration/dag/test_new_dags_reach_workers)
    own_folder = cluster.env["BEATFLOW_DAGS_FOLDER"]
    elsewhere = cluster.tmp / "other-dags"
    elsewhere.mkdir()
    cluster.env["BEATFLOW_DAGS_FOLDER"] = str(elsewhere)
    cluster.start_worker()
    cluster.env["BEATFLOW_DAGS_FOLDER"] = own_folder
    cluster.write_dag("fire_late")
    cluster.start_beat("a")
    cluster.wait_runs("fire_late", 3)
    first = cluster.runs("fire_late")
    assert all(r.state == DagRunState.QUEUED for r in first), first
    assert cluster.worker is not None
    cluster.worker.stop()
    cluster.start_worker()  # a worker that loads the DAG; the queued runs are dispatched
    wait_for(
        lambda: all(
            cluster.store.get_dag_run("fire_late", r.run_id).state == DagRunState.SUCCESS  # type: ignore[union-attr]
            for r in first
        ),
        timeout=60,
        message="the runs made before the worker knew the DAG to succeed",
    )
    assert_every_tick_once(cluster, "fire_late")
