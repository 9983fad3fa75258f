"""The exporter's database poll finds a DAG run that missed its SLA and task runs that are stuck
(lease expired; past the task's time limit) and reports each once: metric, log event, callback."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from beatflow.store import Store
from tests import procs
from tests.integration.observability.conftest import Observed

pytestmark = pytest.mark.slow


def _events(observed: Observed, event: str) -> list[dict[str, object]]:
    out = []
    for line in observed.exporter.log().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == event:
                out.append(record)
    return out


def _wait_polls(observed: Observed, more: int) -> None:
    start = observed.scrape().get_value("beatflow_exporter_polls_total", source="database")
    observed.wait_metric("beatflow_exporter_polls_total", start + more, source="database")


def test_a_dag_run_past_its_sla_is_reported_once_with_metric_log_and_callback(
    observed: Observed,
) -> None:
    store = Store.from_settings(observed.settings)
    now = datetime.now(UTC)
    store.create_dag_run("obs_sla", "late", logical_date=now - timedelta(seconds=30))
    store.create_dag_run("obs_sla", "on-time", logical_date=now)
    store.mark_dag_run_running("obs_sla", "on-time")
    store.finish_dag_run("obs_sla", "on-time", "success")

    observed.wait_metric("beatflow_sla_misses_total", 1, dag="obs_sla")
    marks = observed.marks / "sla-obs_sla"
    procs.wait_for(marks.exists, timeout=60, message="the on_sla_miss callback")
    _wait_polls(observed, 3)

    assert observed.scrape().get_value("beatflow_sla_misses_total", dag="obs_sla") == 1
    assert marks.read_text() == "late\n"
    events = _events(observed, "sla_miss")
    assert [e["run_id"] for e in events] == ["late"]
    assert events[0]["dag_id"] == "obs_sla"
    assert events[0]["level"] == "warning"
    store.close()


def test_task_runs_with_an_expired_lease_or_past_their_time_limit_are_reported_as_stuck(
    observed: Observed,
) -> None:
    url = observed.settings.database_url
    short, long = Store(url, lease_seconds=1.0), Store(url, lease_seconds=600.0)
    tokens = {}
    for run_id, store in (("dead-worker", short), ("hung-task", long)):
        store.create_dag_run("obs_stuck", run_id, logical_date=datetime.now(UTC))
        store.mark_dag_run_running("obs_stuck", run_id)
        claim = store.claim_task_run(
            f"obs_stuck/{run_id}/limited",
            dag_id="obs_stuck",
            run_id=run_id,
            task_id="limited",
            worker="ghost@nowhere",
        )
        assert claim.outcome == "run"
        tokens[run_id] = claim.token

    observed.wait_metric("beatflow_stuck_task_runs", 2)
    procs.wait_for(
        lambda: len(_events(observed, "stuck_task_run")) >= 2,
        timeout=60,
        message="two stuck_task_run log events",
    )
    _wait_polls(observed, 3)
    events = {e["run_id"]: e for e in _events(observed, "stuck_task_run")}
    assert len(_events(observed, "stuck_task_run")) == 2  # each reported once
    assert events["dead-worker"]["reason"] == "lease_expired"
    assert events["hung-task"]["reason"] == "past_time_limit"
    assert events["hung-task"]["worker"] == "ghost@nowhere"

    for run_id, store in (("dead-worker", short), ("hung-task", long)):
        store.finish_task_run(
            f"obs_stuck/{run_id}/limited", tokens[run_id], state="failed", error="gave up"
        )
    procs.wait_for(
        lambda: observed.scrape().get_value("beatflow_stuck_task_runs") == 0,
        timeout=60,
        message="the stuck gauge to fall back to 0",
    )
    short.close()
    long.close()
