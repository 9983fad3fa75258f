"""What workers tell the exporter about task runs through the Celery event stream it already
follows (`beatflow_task_runs_total`, `beatflow_duplicate_deliveries_total`, DAG run outcomes),
without a metrics endpoint in every worker process.

The common case costs no event of its own: a node task that ends normally returns its task
run's outcome (``outcome``), and Celery's own ``task-succeeded`` event carries it (as the
result's repr, which ``parse_outcome`` reads back). The rarer outcomes, which Celery reports as
``task-failed`` or ``task-retried`` or not at all, are custom events (``task_run_finished``)."""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from celery import current_task

log = logging.getLogger(__name__)

TASK_RUN_FINISHED = "beatflow-task-run-finished"
DUPLICATE_DELIVERY = "beatflow-duplicate-delivery"
DAG_RUN_FINISHED = "beatflow-dag-run-finished"

OUTCOME_KEY = "beatflow_task_run"
# the repr of an ``outcome`` dict, as Celery's task-succeeded event carries it
_OUTCOME_RE = re.compile(r"\{'" + OUTCOME_KEY + r"': '([a-z_]{1,32})'(, 'duplicate': True)?\}")


def outcome(state: str, *, duplicate: bool = False) -> dict[str, Any]:
    """A node task's return value: its task run's ``state`` (``duplicate``: this delivery found
    the task run already final and ran nothing). Celery's task-succeeded event carries it."""
    value = str(state)  # a StrEnum's value: its repr would not parse back
    return {OUTCOME_KEY: value, "duplicate": True} if duplicate else {OUTCOME_KEY: value}


def parse_outcome(result: Any) -> tuple[str, bool] | None:
    """(state, duplicate) from a task-succeeded event's ``result`` (the repr of an ``outcome``),
    or None for any other result (a plain task's, an expansion's)."""
    if not isinstance(result, str):
        return None
    match = _OUTCOME_RE.fullmatch(result)
    return None if match is None else (match.group(1), match.group(2) is not None)


_dispatcher: Any = None
_dispatcher_pid = 0


def _get_dispatcher(task: Any) -> Any:
    """One event dispatcher per worker process (Task.send_event builds a new one per call,
    which costs more than the rest of a no-op task run)."""
    global _dispatcher, _dispatcher_pid
    if _dispatcher is None or _dispatcher_pid != os.getpid():
        app = task.app
        _dispatcher = app.events.Dispatcher(
            app.connection_for_write(),
            hostname=task.request.hostname,
            enabled=True,
            buffer_while_offline=False,
        )
        _dispatcher_pid = os.getpid()
    return _dispatcher


def _send(event_type: str, **fields: Any) -> None:
    task = current_task
    if not task or not task.request.id or not task.app.conf.worker_send_task_events:
        return
    try:
        _get_dispatcher(task).send(event_type, uuid=task.request.id, **fields)
    except Exception:  # metrics must never fail a task
        global _dispatcher
        _dispatcher = None  # reconnect next time
        log.debug("could not send %s event", event_type, exc_info=True)


def task_run_finished(dag_id: str, task_id: str, state: str, duration: float | None = None) -> None:
    _send(TASK_RUN_FINISHED, dag_id=dag_id, task_id=task_id, state=state, duration=duration)


def duplicate_delivery(dag_id: str, task_id: str) -> None:
    _send(DUPLICATE_DELIVERY, dag_id=dag_id, task_id=task_id)


def dag_run_finished(dag_id: str, state: str, duration: float | None) -> None:
    _send(DAG_RUN_FINISHED, dag_id=dag_id, state=state, duration=duration)
