"""A worker stopped right after a task run (a deploy) still stores that task run's log lines:
the capture writes in batches (no longer once per task run), on a timer and when a pool process
ends, and neither may drop the last lines."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests import services
from tests.cluster import own_cluster

pytestmark = pytest.mark.slow


def test_the_last_task_runs_log_lines_are_stored_when_the_worker_stops_at_once(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path: Path,
) -> None:
    with own_cluster(redis_server, postgres_server, tmp_path) as c:
        final, tasks = c.run("t_chain")
        assert final.state == "success"
        worker = c.workers[0]
        assert worker.popen is not None
        # as Kubernetes stops a pod: SIGTERM to the main process only (a warm shutdown)
        os.kill(worker.pid, signal.SIGTERM)
        worker.popen.wait(timeout=60)
        lines = c.store.get_task_logs("t_chain", final.run_id, "join")
        messages = [str(line.get("message")) for line in lines]
        assert "joining L, R and 12" in messages, (messages, c.log_tail())
        assert tasks["join"].state == "success"
        # a task that logs nothing stores nothing: beatflow's own started and succeeded
        # lines are DEBUG (Celery's received and succeeded lines say it at INFO), so a
        # quiet task run costs the database no log row
        assert c.store.get_task_logs("t_chain", final.run_id, "total") == []
