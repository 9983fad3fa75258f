"""The results database goes away while tasks run. A finished task's outcome write is retried in
process (waits of at most a second) for BEATFLOW_RESULT_WRITE_RETRY_SECONDS (60 by default), so
a blip does not run the task again; past that budget the message is retried through Celery and
the task runs again as a new try. Every run finishes once the database is back, nothing dropped.
No fixed waits: the outage lasts until this run's retries are seen in the worker's log."""

from __future__ import annotations

import pytest

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from beatflow.settings import Settings
from tests import services
from tests.cluster import cluster
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def write_tries(log: str, run_id: str) -> int:
    """In-process retries of the outcome write of this run's effect task, from the worker log."""
    return log.count(f"while recording t_effect/{run_id}/effect (write try")


def celery_retries(log: str, run_id: str) -> int:
    """Celery retries for the results DB of this run's tasks (each log line carries the run id)."""
    return sum(
        1
        for line in log.splitlines()
        if "results database unavailable (" in line and run_id in line
    )


def test_the_documented_write_retry_budget_is_the_default():
    assert Settings().result_write_retry_seconds == 60.0


def test_a_result_write_is_retried_in_process_and_the_task_does_not_run_again(tmp_path, redis_url):
    pg = services.start_postgres_server()
    try:
        with cluster(tmp_path, redis_url, pg.url) as c:
            records = [
                trigger_dag(runtime_of(c.app), "t_effect", conf={"sleep": 1.0}) for _ in range(4)
            ]
            wait_for(
                lambda: sum(c.count(f"start-{r.run_id}") for r in records) >= 1,
                timeout=30,
                message="a task to start",
            )
            pg.stop()
            # down until a finished task's write was retried several times, in process
            wait_for(
                lambda: max(write_tries(c.log(), r.run_id) for r in records) >= 3,
                timeout=60,
                message="outcome writes to be retried while the database is down",
            )
            retried = [r for r in records if write_tries(c.log(), r.run_id) >= 1]
            pg.start()
            for r in records:
                final, tasks = c.wait("t_effect", r.run_id, timeout=120)
                assert final.state == "success", (r.run_id, tasks)
                assert c.count(f"done-{r.run_id}") == 1
                assert tasks["downstream"].result == 101
            for r in retried:  # within the budget: the task ran once, its write was retried
                assert c.count(f"start-{r.run_id}") == 1
                assert c.tasks("t_effect", r.run_id)["effect"].try_number == 1
                assert celery_retries(c.log(), r.run_id) == 0
    finally:
        pg.close()


def test_past_the_write_retry_budget_celery_retries_and_the_task_runs_again(tmp_path, redis_url):
    pg = services.start_postgres_server()
    try:
        env = {"BEATFLOW_RESULT_WRITE_RETRY_SECONDS": "2"}
        with cluster(tmp_path, redis_url, pg.url, env=env) as c:
            record = trigger_dag(runtime_of(c.app), "t_effect", conf={"sleep": 1.0})
            run_id = record.run_id
            wait_for(lambda: c.count(f"start-{run_id}") == 1, message="the task to start")
            pg.stop()
            # the budget is spent: the write gives up and Celery retries the message
            wait_for(
                lambda: celery_retries(c.log(), run_id) >= 1,
                timeout=60,
                message="the write to give up and Celery to retry",
            )
            assert write_tries(c.log(), run_id) >= 1
            pg.start()
            final, tasks = c.wait("t_effect", run_id, timeout=120)
            assert final.state == "success"
            assert tasks["effect"].try_number == 2  # taken over after its lease expired
            assert c.count(f"start-{run_id}") == 2  # the documented cost past the budget
            assert c.count(f"done-{run_id}") == 2
            assert tasks["downstream"].result == 102  # the second run's effect returned 2
    finally:
        pg.close()
