"""A worker rides out its RabbitMQ node restarting while a task runs: it reconnects, the
durable queue and its persistent messages are still there, the run ends and the step ran once
(the redelivered message finds the task run taken, or done); a DAG sent after the restart runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState
from tests.cluster import cluster
from tests.procs import wait_for
from tests.services import OwnedRabbit

pytestmark = pytest.mark.slow


def test_a_worker_survives_a_rabbitmq_restart_while_a_task_runs(
    tmp_path: Path, own_rabbitmq: OwnedRabbit, redis_url: str, postgres_url: str
) -> None:
    env = {"BEATFLOW_BROKER_URL": own_rabbitmq.url, "BEATFLOW_REDIS_URL": redis_url}
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        worker = c.workers[0]
        run = trigger_dag(
            runtime_of(c.app), "t_single", run_id="rabbit-restart", conf={"sleep": 6.0}
        )
        wait_for(lambda: c.count("step-rabbit-restart") == 1, timeout=60, message="the step")
        own_rabbitmq.stop()
        own_rabbitmq.start()
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
        assert c.count("step-rabbit-restart") == 1  # the step itself ran once
        # the sender's connection went too: its next send reconnects
        final, tasks = c.run("t_map", timeout=120)
        assert final.state == DagRunState.SUCCESS, c.log_tail()
        assert tasks["collect"].result["values"] == [1, 4, 9]
