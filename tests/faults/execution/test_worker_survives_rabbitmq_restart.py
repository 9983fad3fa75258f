"""A worker rides out its RabbitMQ node restarting while a task runs: it reconnects, the
durable queue and its persistent messages are still there, the run ends and the step ran once
(the redelivered message finds the task run taken, or done); a DAG sent after the restart runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from beatflow.states import DagRunState
from tests.cluster import cluster
from tests.faults.execution.test_worker_survives_redis_restart import survives_a_broker_restart
from tests.services import OwnedRabbit

pytestmark = pytest.mark.slow


def test_a_worker_survives_a_rabbitmq_restart_while_a_task_runs(
    tmp_path: Path, own_rabbitmq: OwnedRabbit, redis_url: str, postgres_url: str
) -> None:
    env = {"BEATFLOW_BROKER_URL": own_rabbitmq.url, "BEATFLOW_REDIS_URL": redis_url}
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        survives_a_broker_restart(c, own_rabbitmq, "rabbit-restart")
        # the sender's connection went too: its next send reconnects
        final, tasks = c.run("t_map", timeout=120)
        assert final.state == DagRunState.SUCCESS, c.log_tail()
        assert tasks["collect"].result["values"] == [1, 4, 9]
