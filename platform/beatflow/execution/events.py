"""Custom Celery events that workers send about task runs, so the exporter can count them
(`beatflow_task_runs_total`, `beatflow_duplicate_deliveries_total`, DAG run outcomes) from the
event stream it already follows, without a metrics endpoint in every worker process."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import current_task

log = logging.getLogger(__name__)

TASK_RUN_FINISHED = "beatflow-task-run-finished"
DUPLICATE_DELIVERY = "beatflow-duplicate-delivery"
DAG_RUN_FINISHED = "beatflow-dag-run-finished"


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
