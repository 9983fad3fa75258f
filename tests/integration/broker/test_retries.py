"""A retry whose backoff is longer than one message may wait on the broker (a worker holds a
countdown's message unacked: RabbitMQ closes its channel past consumer_timeout, Redis gives it
back past the visibility timeout): on each broker its wait is made of countdowns capped by
BEATFLOW_MAX_COUNTDOWN_SECONDS (2 s here, for a 10 s backoff), and the second try runs once,
not before it is due, even with the reconciler's re-send of the canvas while it waits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from beatflow.execution.backoff import EARLY_TOLERANCE_SECONDS, retry_due
from beatflow.runs import trigger_dag
from beatflow.runs.dispatch import send_run
from beatflow.runtime import runtime_of
from beatflow.store import TaskRunRecord
from tests.cluster import Cluster, cluster
from tests.conftest import broker_env
from tests.procs import wait_for

pytestmark = pytest.mark.slow

DAG_ID = "t_retry_far"
CAP = "2"  # BEATFLOW_MAX_COUNTDOWN_SECONDS: well below the task's retry_delay of 10 s


def _waiting(c: Cluster, run_id: str) -> TaskRunRecord | None:
    row = c.tasks(DAG_ID, run_id).get("far_retry")
    return row if row is not None and row.state == "up_for_retry" else None


def _held_before(c: Cluster, due: datetime) -> list[dict[str, Any]] | None:
    """The retry's messages the workers hold with a countdown that ends before the retry is
    due (Celery's ``inspect scheduled``), or None while there are none."""
    scheduled = c.app.control.inspect(timeout=1).scheduled() or {}
    held = []
    for entries in scheduled.values():
        for entry in entries:
            eta = datetime.fromisoformat(entry["eta"])
            eta = eta if eta.tzinfo is not None else eta.replace(tzinfo=UTC)
            if entry["request"]["name"] == f"{DAG_ID}.far_retry" and eta < due:
                held.append(entry)
    return held or None


def test_a_retry_longer_than_the_countdown_cap_runs_its_next_try_once_when_due_on_each_broker(
    request, tmp_path, redis_url, postgres_url, broker
):
    env = {**broker_env(request, broker, redis_url), "BEATFLOW_MAX_COUNTDOWN_SECONDS": CAP}
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        c.marks.mkdir(parents=True, exist_ok=True)
        runtime = runtime_of(c.app)
        run_id = trigger_dag(runtime, DAG_ID).run_id
        failed: Any = wait_for(lambda: _waiting(c, run_id), timeout=60, message="the first try")
        due = retry_due(failed, runtime.dag(DAG_ID).tasks["far_retry"].retry)
        assert due is not None and due >= failed.ended_at + timedelta(seconds=9.9)
        # the reconciler's re-send of the canvas while the retry waits: its message waits too
        send_run(runtime, DAG_ID, run_id)
        # the wait is held in countdowns that end before the retry is due (then wait again)
        wait_for(lambda: _held_before(c, due), timeout=30, message="a capped countdown")
        final, tasks = c.wait(DAG_ID, run_id, timeout=90)
        assert final.state == "success", c.log_tail()
        second = tasks["far_retry"]
        assert second.try_number == 2 and second.result == "second try"
        assert second.started_at is not None
        assert second.started_at >= due - timedelta(seconds=EARLY_TOLERANCE_SECONDS)
        assert c.count(f"far-{run_id}") == 2  # each try once: the re-send ran nothing
        assert c.count(f"after-far-{run_id}") == 1
        assert tasks["after_far"].result == "second try"
