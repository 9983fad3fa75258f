"""A worker SIGKILLed in the middle of a task: with acks_late the message comes back (on Redis
after the visibility timeout, on RabbitMQ when the worker's connection drops), the expired
lease is taken over, and the task completes exactly once."""

from __future__ import annotations

import pytest

from beatflow.execution.decide import WORKER_LOST_TRIES
from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests.cluster import cluster
from tests.conftest import broker_env
from tests.procs import wait_for

pytestmark = pytest.mark.slow

FAST_REDELIVERY = {
    # Small on purpose: Redis gives an unacked message back only after the visibility timeout.
    "BEATFLOW_VISIBILITY_TIMEOUT": "7",
    "BEATFLOW_TASK_SOFT_TIME_LIMIT": "5",
    "BEATFLOW_TASK_TIME_LIMIT": "6",
    "BEATFLOW_LEASE_SECONDS": "3",
    "BEATFLOW_UNACKED_RESTORE_INTERVAL": "1",
}


def test_a_task_whose_worker_is_killed_midway_is_redelivered_and_completes_once(
    request, broker, tmp_path, redis_url, postgres_url
):
    env = {**FAST_REDELIVERY, **broker_env(request, broker, redis_url)}
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        record = trigger_dag(runtime_of(c.app), "t_effect", conf={"sleep": 3.0})
        wait_for(
            lambda: c.count(f"start-{record.run_id}") == 1, timeout=30, message="the task to start"
        )
        c.workers[0].kill()  # SIGKILL the worker and its pool: the message stays unacked
        c.start_worker()
        final, tasks = c.wait("t_effect", record.run_id, timeout=90)
        assert final.state == "success"
        assert c.count(f"start-{record.run_id}") == 2  # started again after the kill...
        assert c.count(f"done-{record.run_id}") == 1  # ...and completed exactly once
        assert tasks["effect"].try_number == 2
        assert tasks["downstream"].result == 101


def test_a_task_that_keeps_killing_its_worker_is_failed_and_dead_lettered_after_retries_plus_two(
    tmp_path, redis_url, postgres_url
):
    with cluster(tmp_path, redis_url, postgres_url, env=FAST_REDELIVERY) as c:
        record = trigger_dag(runtime_of(c.app), "t_effect", conf={"sleep": 60.0})
        run_id = record.run_id
        # t_effect.effect has retries=0: 1 try + WORKER_LOST_TRIES (2) tries may die with it
        for started in range(1, 2 + WORKER_LOST_TRIES):
            wait_for(
                lambda n=started: c.count(f"start-{run_id}") == n,
                timeout=90,
                message=f"try {started} to start",
            )
            c.workers[-1].kill()  # SIGKILL the worker and its pool mid-task, again
            c.start_worker()
        final, tasks = c.wait("t_effect", run_id, timeout=120)
        assert final.state == "failed"
        effect = tasks["effect"]
        assert effect.state == "failed" and "worker lost 3 times" in (effect.error or "")
        assert c.count(f"start-{run_id}") == 1 + WORKER_LOST_TRIES  # no further try started
        assert c.count(f"done-{run_id}") == 0
        letters = [d for d in c.store.list_dead_letters("t_effect") if d.run_id == run_id]
        assert len(letters) == 1 and letters[0].tries == 1 + WORKER_LOST_TRIES
        assert tasks["downstream"].state == "upstream_failed"
