"""``beatflow.task_value``: a Celery user who holds only an ``AsyncResult`` (or a task id, as
Flower and the worker's log show it) of a DAG task gets the value the task returned, from the
results DB, on either broker; a failed task run or an unknown id says so instead."""

from __future__ import annotations

import re
import uuid

import pytest

import beatflow
from beatflow.errors import TaskValueError
from beatflow.runs.task_value import task_run_of
from tests.cluster import cluster
from tests.conftest import broker_env
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def _celery_ids(log: str, name: str) -> list[str]:
    """The ids of ``name``'s tasks the worker logged as succeeded, as a Celery user sees them."""
    return re.findall(rf"Task {re.escape(name)}\[([0-9a-f-]{{36}})\] succeeded", log)


def test_a_dag_tasks_value_is_reached_from_its_async_result_or_its_task_id(
    request, broker, tmp_path, redis_url, postgres_url
):
    env = broker_env(request, broker, redis_url)
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        final, _ = c.run("t_chain")
        assert final.state == "success", c.log_tail()
        [total_id] = wait_for(lambda: _celery_ids(c.log(), "t_chain.total"), 30, message="log")
        # Celery's result is the outcome (in Flower), not stored: the value is in the results DB
        assert beatflow.task_value(c.app.AsyncResult(total_id)) == 12
        assert beatflow.task_value(total_id, app=c.app) == 12
        assert beatflow.task_value(
            c.app.AsyncResult(_celery_ids(c.log(), "t_chain.double")[0])
        ) == [
            2,
            4,
            6,
        ]

        final, _ = c.run("t_map")
        assert final.state == "success", c.log_tail()
        # the expander (a t_map.square task too) and the three instances, each its own id
        wait_for(lambda: len(_celery_ids(c.log(), "t_map.square")) == 4, 30, message="log")
        runs = [task_run_of(c.app.AsyncResult(i)) for i in _celery_ids(c.log(), "t_map.square")]
        instances = sorted((r.map_index, r.celery_task_id) for r in runs if r.map_index >= 0)
        assert [i for i, _ in instances] == [0, 1, 2]
        assert [beatflow.task_value(cid, app=c.app) for _, cid in instances] == [1, 4, 9]

        final, tasks = c.run("t_fixable")
        assert final.state == "failed"
        failed_id = tasks["fixable"].celery_task_id
        assert failed_id
        with pytest.raises(TaskValueError, match="its task run is failed") as caught:
            beatflow.task_value(c.app.AsyncResult(failed_id))
        assert caught.value.state == "failed"

        unknown = str(uuid.uuid4())
        with pytest.raises(LookupError, match="no DAG task run's latest try is this Celery task"):
            beatflow.task_value(unknown, app=c.app)
