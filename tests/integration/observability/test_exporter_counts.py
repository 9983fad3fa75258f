"""A real worker runs a DAG with one retried task and one failing task; the exporter's counters
and gauges move by exactly the right amounts, and the per-task callbacks ran."""

from __future__ import annotations

import json

import pytest

from beatflow.runs import follow_run, trigger_dag
from beatflow.runtime import runtime_of
from tests import procs
from tests.integration.observability.conftest import Observed, Samples

pytestmark = pytest.mark.slow


def settled_scrape(observed: Observed) -> Samples:
    """A scrape whose database gauges (dead letters, obs_counts runs by state) match the
    database now: runs left by other tests of the module have been counted, whatever the order
    the tests ran in."""
    store = runtime_of(observed.app).store

    def settled() -> Samples | None:
        letters = store.count_dead_letters()
        failed = store.count_dag_runs_by_state().get(("obs_counts", "failed"), 0)
        samples = observed.scrape()
        by_state = samples.get_value("beatflow_dag_runs_by_state", dag="obs_counts", state="failed")
        if samples.get_value("beatflow_dead_letters") == letters and by_state == failed:
            return samples
        return None

    result: Samples = procs.wait_for(
        settled, timeout=60, interval=0.2, message="the database gauges settle"
    )
    return result


def wait_queue_length(observed: Observed, queue: str, length: int) -> None:
    """Wait, with a deadline, for ``celery_queue_length`` of ``queue`` to read ``length``: the
    exporter polls it from Redis on its own clock (every 0.2 s here), apart from the database
    gauges, so one scrape taken when those settled may still show an earlier length."""

    def reached() -> bool:
        return observed.scrape().get_value("celery_queue_length", queue_name=queue) == length

    assert procs.wait_for(reached, timeout=30, message=f"celery_queue_length of {queue} = {length}")


def test_a_dag_with_one_retry_and_one_failure_moves_each_counter_by_its_amount(
    observed: Observed,
) -> None:
    marks = ("on_retry-retried_once", "on_failure-fails", "on_failure-retried_once")
    marked = {name: _marks(observed, name) for name in marks}
    before = settled_scrape(observed)
    letters = before.get_value("beatflow_dead_letters")
    failed_runs = before.get_value("beatflow_dag_runs_by_state", dag="obs_counts", state="failed")
    run = trigger_dag(runtime_of(observed.app), "obs_counts")
    final = follow_run(runtime_of(observed.app), "obs_counts", run.run_id, timeout=60)
    assert final.state == "failed"

    after = observed.wait_metric(
        "beatflow_dag_runs_total",
        1 + before.total("beatflow_dag_runs_total", dag="obs_counts"),
        dag="obs_counts",
    )
    after = observed.wait_metric(
        "beatflow_dag_runs_by_state", failed_runs + 1, dag="obs_counts", state="failed"
    )
    after = observed.wait_metric("beatflow_dead_letters", letters + 1)

    def moved(metric: str, /, **labels: str) -> float:
        return after.total(metric, **labels) - before.total(metric, **labels)

    # beatflow's own view: one retry then success, one final failure, one failed DAG run
    assert (
        moved(
            "beatflow_task_runs_total", dag="obs_counts", task="retried_once", state="up_for_retry"
        )
        == 1
    )
    assert (
        moved("beatflow_task_runs_total", dag="obs_counts", task="retried_once", state="success")
        == 1
    )
    assert moved("beatflow_task_runs_total", dag="obs_counts", task="fails", state="failed") == 1
    assert moved("beatflow_task_runs_total", dag="obs_counts") == 3
    assert moved("beatflow_dag_runs_total", dag="obs_counts", state="failed") == 1
    assert moved("beatflow_dag_runs_total", dag="obs_counts", state="success") == 0
    assert moved("beatflow_dag_run_duration_seconds_count", dag="obs_counts") == 1
    assert moved("beatflow_dag_runs_by_state", dag="obs_counts", state="failed") == 1
    assert moved("beatflow_dead_letters") == 1  # this run's one final failure
    assert moved("beatflow_duplicate_deliveries_total") == 0

    # Celery's view (celery-exporter's names): the retried task ran twice, once retried; the
    # failing task failed for Celery too (the wrapper continues the canvas, then raises)
    name = "obs_counts.retried_once"
    assert moved("celery_task_received_total", name=name) == 2
    assert moved("celery_task_started_total", name=name) == 2
    assert moved("celery_task_retried_total", name=name) == 1
    assert moved("celery_task_succeeded_total", name=name) == 1
    failed = {ls: v for (n, ls), v in after.items() if n == "celery_task_failed_total" and v}
    errors = [line for line in observed.log().splitlines() if '"level": "error"' in line]
    assert moved("celery_task_failed_total", name=name) == 0, (failed, errors[-5:])
    assert moved("celery_task_failed_total", name="obs_counts.fails") == 1
    assert moved("celery_task_succeeded_total", name="obs_counts.fails") == 0
    assert moved("celery_task_runtime_count", name=name) == 1
    assert moved("celery_task_sent_total", name=name) >= 2  # first send + the retry's
    queue = observed.settings.default_queue
    assert moved("celery_task_received_total", name=name, queue_name=queue) == 2

    # heartbeats come every 2 s: wait for this worker's, with a deadline
    node = f"{observed.worker.name}@"

    def worker_up() -> list[float]:
        return [
            v
            for (n, ls), v in observed.scrape().items()
            if n == "celery_worker_up" and dict(ls)["hostname"].startswith(node) and v == 1
        ]

    assert procs.wait_for(worker_up, timeout=30, message=f"celery_worker_up for {node}") == [1.0]
    assert after.get_value("beatflow_exporter_source_up", source="events") == 1
    assert after.get_value("beatflow_exporter_source_up", source="redis") == 1
    assert after.get_value("beatflow_exporter_source_up", source="database") == 1
    # the last Redis poll before the run ended may have seen its finish_run message still
    # queued (CI saw 1): the queue drains
    wait_queue_length(observed, queue, 0)

    # per-task callbacks for users' own alerting
    calls = {name: _marks(observed, name) - marked[name] for name in marks}
    assert calls == {
        "on_retry-retried_once": 1,
        "on_failure-fails": 1,
        "on_failure-retried_once": 0,
    }


def _marks(observed: Observed, name: str) -> int:
    """How many times the callback behind marker ``name`` ran so far (tests/dags/_marks.py)."""
    path = observed.marks / name
    return len(path.read_text()) if path.exists() else 0


def test_a_log_line_from_inside_a_task_run_is_json_with_the_correlation_ids(
    observed: Observed,
) -> None:
    run = trigger_dag(runtime_of(observed.app), "obs_counts")
    follow_run(runtime_of(observed.app), "obs_counts", run.run_id, timeout=60)
    lines = [
        json.loads(line)
        for line in observed.worker.log().splitlines()
        if line.startswith("{") and run.run_id in line
    ]
    user_lines = [r for r in lines if r["message"] == "about to fail"]
    assert len(user_lines) == 1
    line = user_lines[0]
    assert line["dag_id"] == "obs_counts"
    assert line["run_id"] == run.run_id
    assert line["task_id"] == "fails"
    assert line["try_number"] == 1
    assert line["celery_task_id"]
    assert line["dedupe_key"] == f"obs_counts/{run.run_id}/fails"
    # Celery's own line about the same task run carries the ids too
    celery_lines = [
        r
        for r in lines
        if r["logger"].startswith("celery") and r.get("celery_task_id") == line["celery_task_id"]
    ]
    assert celery_lines, "no Celery log line carries the task's correlation ids"
    assert all(r["run_id"] == run.run_id and r["task_id"] == "fails" for r in celery_lines)


def test_the_backlog_counts_waiting_reserved_and_running_messages_of_the_queue(
    observed: Observed,
) -> None:
    queue = observed.settings.default_queue
    release = observed.marks / "release-blocked"
    runs = [trigger_dag(runtime_of(observed.app), "obs_block") for _ in range(3)]
    try:
        # concurrency 2: two task runs hold the worker's slots (unacked), the third waits
        samples = observed.wait_metric("beatflow_queue_backlog", 3, queue_name=queue)
        assert samples.get_value("beatflow_queue_backlog", queue_name=queue) == 3
        observed.wait_metric("celery_worker_tasks_active", 2)
        # 1 (the third message) once a Redis poll follows the worker's second fetch
        wait_queue_length(observed, queue, 1)
    finally:
        observed.marks.mkdir(parents=True, exist_ok=True)
        release.touch()
    for run in runs:
        assert (
            follow_run(runtime_of(observed.app), "obs_block", run.run_id, timeout=60).state
            == "success"
        )

    def drained() -> bool:
        s = observed.scrape()
        return s.get_value("beatflow_queue_backlog", queue_name=queue) == 0 and (
            s.get_value("celery_queue_length", queue_name=queue) == 0
        )

    procs.wait_for(drained, timeout=30, message="the backlog to drain")


def test_a_redelivered_task_counts_as_a_duplicate_and_not_as_a_second_task_run(
    observed: Observed,
) -> None:
    # A DAG task's outcome rides on Celery's own task-succeeded event (its result): a second
    # delivery of a finished task run is a duplicate, not another success.
    start = observed.scrape()
    run = trigger_dag(runtime_of(observed.app), "t_chain")
    assert (
        follow_run(runtime_of(observed.app), "t_chain", run.run_id, timeout=60).state == "success"
    )
    six = start.total("beatflow_task_runs_total", dag="t_chain") + 6  # its six task runs
    before = observed.wait_metric("beatflow_task_runs_total", six, dag="t_chain", state="success")
    assert before.total("beatflow_task_runs_total", dag="t_chain") == six
    # its closing task (join) closed the run and said so in the same event
    ran = start.total("beatflow_dag_runs_total", dag="t_chain", state="success") + 1
    before = observed.wait_metric("beatflow_dag_runs_total", ran, dag="t_chain", state="success")
    timed = start.total("beatflow_dag_run_duration_seconds_count", dag="t_chain") + 1
    assert before.total("beatflow_dag_run_duration_seconds_count", dag="t_chain") == timed
    name = "t_chain.numbers"
    observed.app.send_task(name, args=(run.run_id,), queue=observed.settings.default_queue)
    dups = before.total("beatflow_duplicate_deliveries_total", dag="t_chain", task="numbers")
    observed.wait_metric(
        "beatflow_duplicate_deliveries_total", dups + 1, dag="t_chain", task="numbers"
    )
    succeeded = before.total("celery_task_succeeded_total", name=name)
    after = observed.wait_metric("celery_task_succeeded_total", succeeded + 1, name=name)
    assert after.total("beatflow_task_runs_total", dag="t_chain") == six
    assert after.total("beatflow_duplicate_deliveries_total") == dups + 1


def test_skipped_task_runs_are_counted_by_state(observed: Observed) -> None:
    """A task that raised Skip and one skipped by its trigger rule each count once as skipped;
    the run's other task as a success."""
    before = observed.scrape()
    run = trigger_dag(runtime_of(observed.app), "t_skip_self", conf={"skip": True})
    final = follow_run(runtime_of(observed.app), "t_skip_self", run.run_id, timeout=60)
    assert final.state == "success"
    after = observed.wait_metric(
        "beatflow_task_runs_total", before.total("beatflow_task_runs_total", dag="t_skip_self") + 3,
        dag="t_skip_self",
    )  # fmt: skip

    def moved(**labels: str) -> float:
        metric, dag = "beatflow_task_runs_total", "t_skip_self"
        return after.total(metric, dag=dag, **labels) - before.total(metric, dag=dag, **labels)

    assert moved(task="maybe", state="skipped") == 1  # raised Skip
    assert moved(task="load", state="skipped") == 1  # all_success below a skipped task
    assert moved(task="cleanup", state="success") == 1
