"""EventHandler: Celery and beatflow events (plain dicts, as the receiver hands them over) move
celery-exporter's metrics and beatflow's by the right amounts, with bounded labels."""

from __future__ import annotations

from beatflow.execution.events import outcome
from beatflow.observability.celery_events import EventHandler, exception_name
from beatflow.observability.metrics import Metrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _handler(clock: Clock | None = None) -> EventHandler:
    return EventHandler(
        Metrics(), default_queue="default", worker_timeout=10.0, clock=clock or Clock()
    )


def value(h: EventHandler, metric: str, /, **labels: str) -> float:
    return h.metrics.registry.get_sample_value(metric, labels) or 0.0


def test_a_task_sent_to_a_queue_counts_its_later_events_under_that_queue() -> None:
    h = _handler()
    h.handle(
        {
            "type": "task-sent",
            "uuid": "u1",
            "name": "etl.load",
            "queue": "io",
            "hostname": "web-1",
            "timestamp": 999.0,
        }
    )
    for kind in ("task-received", "task-started"):
        h.handle({"type": kind, "uuid": "u1", "hostname": "w1@host", "timestamp": 999.5})
    h.handle({"type": "task-succeeded", "uuid": "u1", "hostname": "w1@host", "runtime": 0.25})
    labels = {"name": "etl.load", "hostname": "w1@host", "queue_name": "io"}
    assert (
        value(h, "celery_task_sent_total", name="etl.load", hostname="web-1", queue_name="io") == 1
    )
    assert value(h, "celery_task_received_total", **labels) == 1
    assert value(h, "celery_task_started_total", **labels) == 1
    assert value(h, "celery_task_succeeded_total", **labels) == 1
    assert value(h, "celery_task_runtime_count", **labels) == 1
    assert value(h, "celery_task_runtime_sum", **labels) == 0.25
    # the other counters exist at zero so a first failure shows as an increase
    assert (
        h.metrics.registry.get_sample_value("celery_task_failed_total", {**labels, "exception": ""})
        == 0.0
    )
    assert value(h, "beatflow_exporter_events_total") == 4


def test_a_failure_is_labelled_with_its_exception_class_and_unknown_queues_use_the_default() -> (
    None
):
    h = _handler()
    h.handle({"type": "task-received", "uuid": "u2", "name": "etl.load", "hostname": "w1@h"})
    h.handle(
        {
            "type": "task-failed",
            "uuid": "u2",
            "hostname": "w1@h",
            "exception": "ValueError('bad row 7')",
        }
    )
    assert (
        value(
            h,
            "celery_task_failed_total",
            name="etl.load",
            hostname="w1@h",
            queue_name="default",
            exception="ValueError",
        )
        == 1
    )


def test_exception_names_are_bounded_class_names() -> None:
    assert exception_name("ValueError('x')") == "ValueError"
    assert exception_name("psycopg.errors.UniqueViolation('dup')") == "UniqueViolation"
    assert exception_name("garbage") == "UnknownException"
    assert exception_name(None) == "UnknownException"


def test_beatflow_events_count_task_runs_duplicates_and_dag_runs() -> None:
    h = _handler()
    h.know_dags([("etl", ["load"])])
    assert value(h, "beatflow_task_runs_total", dag="etl", task="load", state="failed") == 0
    h.handle(
        {
            "type": "beatflow-task-run-finished",
            "dag_id": "etl",
            "task_id": "load",
            "state": "up_for_retry",
        }
    )
    # the common outcomes ride on Celery's own task-succeeded event, as the result's repr
    h.handle({"type": "task-received", "uuid": "u1", "name": "etl.load", "hostname": "w"})
    h.handle({"type": "task-succeeded", "uuid": "u1", "result": repr(outcome("success"))})
    h.handle({"type": "task-received", "uuid": "u2", "name": "etl.load", "hostname": "w"})
    h.handle(
        {"type": "task-succeeded", "uuid": "u2", "result": repr(outcome("success", duplicate=True))}
    )
    h.handle({"type": "beatflow-duplicate-delivery", "dag_id": "etl", "task_id": "load"})
    h.handle({"type": "beatflow-callback", "dag_id": "etl", "event": "failure", "outcome": "error"})
    h.handle(
        {"type": "beatflow-dag-run-finished", "dag_id": "etl", "state": "success", "duration": 42.0}
    )
    assert value(h, "beatflow_task_runs_total", dag="etl", task="load", state="up_for_retry") == 1
    assert value(h, "beatflow_task_runs_total", dag="etl", task="load", state="success") == 1
    assert value(h, "beatflow_duplicate_deliveries_total", dag="etl", task="load") == 2
    assert value(h, "beatflow_callbacks_total", dag="etl", event="failure", outcome="error") == 1
    assert value(h, "beatflow_dag_runs_total", dag="etl", state="success") == 1
    assert value(h, "beatflow_dag_run_duration_seconds_count", dag="etl") == 1
    assert value(h, "beatflow_dag_run_duration_seconds_bucket", dag="etl", le="60.0") == 1
    assert value(h, "beatflow_dag_run_duration_seconds_bucket", dag="etl", le="30.0") == 0


def test_a_worker_is_up_while_it_sends_heartbeats_and_down_after_the_timeout() -> None:
    clock = Clock()
    h = _handler(clock)
    h.handle({"type": "worker-online", "hostname": "w1@h", "freq": 2.0})
    h.handle({"type": "worker-heartbeat", "hostname": "w1@h", "freq": 2.0, "active": 3})
    assert value(h, "celery_worker_up", hostname="w1@h") == 1
    assert value(h, "celery_worker_tasks_active", hostname="w1@h") == 3
    clock.now += 9
    assert h.sweep_workers() == []
    clock.now += 2
    assert h.sweep_workers() == ["w1@h"]
    assert value(h, "celery_worker_up", hostname="w1@h") == 0
    assert value(h, "celery_worker_tasks_active", hostname="w1@h") == 0


def test_a_worker_going_offline_is_down_at_once() -> None:
    h = _handler()
    h.handle({"type": "worker-heartbeat", "hostname": "w1@h", "freq": 2.0, "active": 1})
    h.handle({"type": "worker-offline", "hostname": "w1@h"})
    assert value(h, "celery_worker_up", hostname="w1@h") == 0


def test_the_task_table_is_bounded_and_forgets_finished_tasks() -> None:
    h = EventHandler(Metrics(), max_tracked_tasks=10)
    for i in range(25):
        h.handle({"type": "task-received", "uuid": f"u{i}", "name": "t", "hostname": "w"})
    assert len(h._tasks) == 10
    h.handle({"type": "task-succeeded", "uuid": "u24", "hostname": "w", "runtime": 0.1})
    assert "u24" not in h._tasks


def test_the_event_lag_is_the_age_of_the_last_event() -> None:
    clock = Clock()
    h = _handler(clock)
    h.handle({"type": "worker-heartbeat", "hostname": "w", "timestamp": clock.now - 0.5})
    assert value(h, "beatflow_exporter_event_lag_seconds") == 0.5


def test_only_a_dag_tasks_outcome_result_counts_as_a_task_run() -> None:
    h = _handler()
    h.know_dags([("etl", ["load"])])
    events = [
        ("etl.load", "{'beatflow_task_run': 'success'}"),  # the one that counts
        ("etl.load", "{'beatflow_task_run': 'success', 'extra': 1}"),  # not an outcome
        ("etl.load", "None"),
        ("etl.load", None),
        ("etl.load", "{'beatflow_task_run': 'Success\\n'}"),  # not a state
        ("proj.tasks.add", "{'beatflow_task_run': 'success'}"),  # a plain task's result
        ("beat flow.x", "{'beatflow_task_run': 'success'}"),  # not a DAG task's name
        ("etl.load", "{'beatflow_task_run': 'success', 'dag_run': 'DROP TABLE'}"),
        ("etl.load", "{'beatflow_task_run': __import__('os').getpid()}"),  # never evaluated
        ("etl.load", "{'beatflow_task_run': 'success', 'x': " + "[" * 5000 + "]" * 5000 + "}"),
    ]
    for i, (name, result) in enumerate(events):
        h.handle({"type": "task-received", "uuid": f"u{i}", "name": name, "hostname": "w"})
        h.handle({"type": "task-succeeded", "uuid": f"u{i}", "result": result, "hostname": "w"})
    assert value(h, "beatflow_task_runs_total", dag="etl", task="load", state="success") == 1
    samples = [
        s
        for metric in h.metrics.registry.collect()
        for s in metric.samples
        if s.name == "beatflow_task_runs_total" and s.value
    ]
    assert len(samples) == 1, samples
    assert value(h, "celery_task_succeeded_total", name="etl.load", hostname="w",
                 queue_name="default") == 8  # fmt: skip


def test_a_closing_tasks_outcome_counts_its_dag_run_too() -> None:
    h = _handler()
    h.know_dags([("etl", ["load"])])
    closed = outcome("success", dag_run="failed", dag_run_seconds=12.5)
    h.handle({"type": "task-received", "uuid": "u1", "name": "etl.load", "hostname": "w"})
    h.handle({"type": "task-succeeded", "uuid": "u1", "result": repr(closed), "hostname": "w"})
    assert value(h, "beatflow_task_runs_total", dag="etl", task="load", state="success") == 1
    assert value(h, "beatflow_dag_runs_total", dag="etl", state="failed") == 1
    assert value(h, "beatflow_dag_run_duration_seconds_count", dag="etl") == 1
    assert value(h, "beatflow_dag_run_duration_seconds_bucket", dag="etl", le="30.0") == 1
    assert value(h, "beatflow_dag_run_duration_seconds_bucket", dag="etl", le="5.0") == 0


def test_messages_held_by_a_worker_count_in_flight_until_done_retried_or_the_worker_gone() -> None:
    clock = Clock()
    h = _handler(clock)
    for uuid, queue in (("u1", "io"), ("u2", "io"), ("u3", "default"), ("u4", "io")):
        h.handle({"type": "task-sent", "uuid": uuid, "name": "etl.load", "queue": queue})
    assert h.in_flight() == {}  # waiting in the broker: the broker counts those
    h.handle({"type": "worker-online", "hostname": "w1@a", "freq": 2.0})
    h.handle({"type": "worker-online", "hostname": "w2@b", "freq": 2.0})
    h.handle({"type": "task-received", "uuid": "u1", "hostname": "w1@a"})
    h.handle({"type": "task-received", "uuid": "u2", "hostname": "w1@a"})
    h.handle({"type": "task-started", "uuid": "u2", "hostname": "w1@a"})
    h.handle({"type": "task-received", "uuid": "u3", "hostname": "w2@b"})
    h.handle({"type": "task-received", "uuid": "u4", "hostname": "w2@b"})
    assert h.in_flight() == {"io": 3, "default": 1}
    h.handle({"type": "task-succeeded", "uuid": "u2", "hostname": "w1@a", "runtime": 0.1})
    h.handle({"type": "task-retried", "uuid": "u1", "hostname": "w1@a"})
    assert h.in_flight() == {"io": 1, "default": 1}
    h.handle({"type": "worker-offline", "hostname": "w2@b"})  # RabbitMQ redelivers its messages
    assert h.in_flight() == {}
    h.handle({"type": "task-received", "uuid": "u1", "hostname": "w1@a"})  # the retry arrives
    assert h.in_flight() == {"io": 1}
    clock.now += 60  # w1 went silent: swept, its message is released too
    assert h.sweep_workers() == ["w1@a"]
    assert h.in_flight() == {}


def test_a_grouped_tasks_dotted_id_counts_when_its_dag_has_it() -> None:
    h = _handler()
    h.know_dags([("etl", ["extract.load", "publish"])])
    outcome = "{'beatflow_task_run': 'success'}"
    for i, name in enumerate(["etl.extract.load", "etl.extract.nope", "etl.publish"]):
        h.handle({"type": "task-received", "uuid": f"g{i}", "name": name, "hostname": "w"})
        h.handle({"type": "task-succeeded", "uuid": f"g{i}", "result": outcome, "hostname": "w"})
    runs = "beatflow_task_runs_total"
    assert value(h, runs, dag="etl", task="extract.load", state="success") == 1
    assert value(h, runs, dag="etl", task="publish", state="success") == 1
    assert value(h, runs, dag="etl", task="extract.nope", state="success") in (None, 0)
