"""Checks that a cancelled (or timed-out) run started nothing, on state: wait until a worker is
done with a task's message, then read the task's row, instead of waiting for a log line only
the guard under test would write."""

from __future__ import annotations

import re

from tests.cluster import Cluster


def consumed(cluster: Cluster, task_name: str, task_id: str = r"[-0-9a-f]+") -> int:
    """How many messages of ``task_name`` (with ``task_id``) workers are done with: Celery's
    trace logs each outcome (succeeded, ignored, raised), whatever beatflow made of it."""
    outcome = rf"Task {re.escape(task_name)}\[{task_id}\] (?:succeeded|ignored|raised)"
    return len(re.findall(outcome, cluster.log()))


def assert_not_started(cluster: Cluster, dag_id: str, run_id: str, *task_ids: str) -> None:
    """No row of these tasks is running or succeeded."""
    rows = cluster.tasks(dag_id, run_id)
    started = {t: rows[t].state for t in task_ids if t in rows}
    assert not {t: s for t, s in started.items() if s in ("running", "success")}, started
