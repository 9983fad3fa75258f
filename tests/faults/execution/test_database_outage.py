"""The results database goes away for a few seconds while tasks run: tasks retry with backoff
and every run finishes once it is back, with no result dropped."""

from __future__ import annotations

import time

import pytest

from beatflow.runs import trigger_dag
from tests import services
from tests.cluster import cluster
from tests.procs import wait_for

pytestmark = pytest.mark.slow


def test_tasks_retry_while_postgresql_is_down_and_finish_when_it_is_back(tmp_path, redis_url):
    pg = services.start_postgres_server()
    try:
        with cluster(tmp_path, redis_url, pg.url) as c:
            records = [trigger_dag(c.app, "t_effect", conf={"sleep": 1.0}) for _ in range(4)]
            wait_for(
                lambda: sum(c.count(f"start-{r.run_id}") for r in records) >= 1,
                timeout=30,
                message="a task to start",
            )
            pg.stop()
            down_since = time.monotonic()
            wait_for(
                lambda: "results database unavailable" in c.log(),
                timeout=30,
                message="the worker to notice the outage",
            )
            # keep it down a few seconds so retries really happen
            wait_for(lambda: time.monotonic() - down_since > 4, timeout=10, interval=0.2)
            pg.start()
            for r in records:
                final, tasks = c.wait("t_effect", r.run_id, timeout=120)
                assert final.state == "success", (r.run_id, tasks)
                assert c.count(f"done-{r.run_id}") == 1
                assert tasks["downstream"].result == 101
    finally:
        pg.close()
