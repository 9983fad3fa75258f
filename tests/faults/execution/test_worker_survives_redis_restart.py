"""A worker survives its Redis restarting while a task runs. Stock kombu (celery/kombu#970,
#582) lets the worker die of it ("Unrecoverable error: AttributeError 'NoneType' object has no
attribute 'hostname'", while restoring unacked messages on the way down); beatflow's Redis
transport keeps the connection details that restore needs, so the worker reconnects instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState
from tests.cluster import Cluster, cluster
from tests.procs import wait_for
from tests.services import OwnedRedis, OwnedServer

pytestmark = pytest.mark.slow


def survives_a_broker_restart(c: Cluster, broker: OwnedServer, run_id: str) -> None:
    """``broker`` stopped and started again while ``run_id``'s task runs: the worker reconnects
    (it does not die), the run succeeds and its step ran once."""
    worker = c.workers[0]
    run = trigger_dag(runtime_of(c.app), "t_single", run_id=run_id, conf={"sleep": 6.0})
    wait_for(lambda: c.count(f"step-{run_id}") == 1, timeout=60, message="the step")
    broker.stop()
    broker.start()
    wait_for(
        lambda: (
            "Connection to broker lost" in worker.log()
            and "Connected to " in worker.log().split("Connection to broker lost")[-1]
        ),
        timeout=120,
        message="the worker to reconnect after the restart",
    )
    assert worker.popen is not None and worker.popen.poll() is None, worker.log()[-3000:]
    assert "Unrecoverable error" not in worker.log()
    final, _ = c.wait("t_single", run.run_id, timeout=180)
    assert final.state == DagRunState.SUCCESS, c.log_tail()
    assert c.count(f"step-{run_id}") == 1  # the step itself ran once


def test_a_worker_survives_a_redis_restart_while_a_task_runs(
    tmp_path: Path, own_redis: OwnedRedis, postgres_url: str
) -> None:
    with cluster(tmp_path, own_redis.url, postgres_url) as c:
        survives_a_broker_restart(c, own_redis, "redis-restart")
