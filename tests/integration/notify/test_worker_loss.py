"""A worker SIGKILLed while it sends a notification: the ``beatflow.notify`` message comes back
(acks_late, after the visibility timeout) to another worker, which finds the event claimed and
sends nothing: the event is never sent twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests import procs
from tests.cluster import cluster
from tests.integration.notify.conftest import DAGS, Hook

pytestmark = pytest.mark.slow

FAST_REDELIVERY = {
    "BEATFLOW_VISIBILITY_TIMEOUT": "7",
    "BEATFLOW_TASK_SOFT_TIME_LIMIT": "5",
    "BEATFLOW_TASK_TIME_LIMIT": "6",
    "BEATFLOW_LEASE_SECONDS": "3",
    "BEATFLOW_UNACKED_RESTORE_INTERVAL": "1",
}


def test_a_worker_killed_mid_send_never_makes_the_event_send_twice(
    tmp_path: Path, redis_url: str, postgres_url: str, hook: Hook
) -> None:
    env = {**FAST_REDELIVERY, "NOTIFY_TEST_WEBHOOK": hook.url}
    hook.release.clear()
    with cluster(tmp_path, redis_url, postgres_url, dags=DAGS, env=env) as c:
        run = trigger_dag(runtime_of(c.app), "n_slow_hook")
        final, tasks = c.wait("n_slow_hook", run.run_id)
        assert final.state == "success" and tasks["hello"].state == "success"
        procs.wait_for(
            lambda: hook.received("/slow", run.run_id), timeout=30, message="the send to start"
        )
        [row] = c.store.list_notifications("n_slow_hook", run.run_id)
        assert row.state == "sending"
        c.workers[0].kill()  # SIGKILL mid-send: the beatflow.notify message stays unacked
        hook.release.set()
        c.start_worker()
        procs.wait_for(
            lambda: f"notification {row.event_key} is not pending" in c.log(),
            timeout=90,
            message="the redelivered beatflow.notify to run",
        )
        assert len(hook.received("/slow", run.run_id)) == 1
        again = c.store.get_notification(row.event_key)
        assert again is not None and again.state == "sending"  # at most once: never re-sent
