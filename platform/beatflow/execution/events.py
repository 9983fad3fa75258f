"""What workers tell the exporter about task runs through the Celery event stream it already
follows (`beatflow_task_runs_total`, `beatflow_duplicate_deliveries_total`, DAG run outcomes),
without a metrics endpoint in every worker process.

The common case costs no event of its own: a node task that ends normally returns its task
run's outcome (``outcome``), and Celery's own ``task-succeeded`` event carries it (as the
result's repr, which ``parse_outcome`` reads back). The rarer outcomes, which Celery reports as
``task-failed`` or ``task-retried`` or not at all, are custom events (``task_run_finished``)."""

from __future__ import annotations

import ast
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

from celery import current_task

log = logging.getLogger(__name__)

TASK_RUN_FINISHED = "beatflow-task-run-finished"
# sent by workers of earlier versions for a redelivered .map() expander (its task was replaced,
# so Celery reported no outcome); the exporter still counts it
DUPLICATE_DELIVERY = "beatflow-duplicate-delivery"
DAG_RUN_FINISHED = "beatflow-dag-run-finished"

OUTCOME_KEY = "beatflow_task_run"
_OUTCOME_PREFIX = "{'" + OUTCOME_KEY + "': "
_OUTCOME_MAX_CHARS = 200  # an outcome's repr is shorter; anything longer is not one
_STATE_RE = re.compile(r"[a-z_]{1,32}")
_OUTCOME_FIELDS = frozenset({OUTCOME_KEY, "duplicate", "dag_run", "dag_run_seconds"})


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a node task's task-succeeded event says (see ``outcome``)."""

    state: str  # the task run's
    duplicate: bool = False  # this delivery found the task run final and ran nothing
    dag_run: str | None = None  # the run's final state, when this task closed its run
    dag_run_seconds: float | None = None


def outcome(
    state: str,
    *,
    duplicate: bool = False,
    dag_run: str | None = None,
    dag_run_seconds: float | None = None,
) -> dict[str, Any]:
    """A node task's return value: its task run's ``state`` (``duplicate``: this delivery found
    the task run already final and ran nothing; ``dag_run``: the run's final state when this
    task closed it, with its duration). Celery's task-succeeded event carries its repr."""
    value: dict[str, Any] = {OUTCOME_KEY: str(state)}  # a StrEnum's value, not its repr
    if duplicate:
        value["duplicate"] = True
    if dag_run is not None:
        value["dag_run"] = str(dag_run)
        value["dag_run_seconds"] = dag_run_seconds
    return value


def parse_outcome(result: Any) -> Outcome | None:
    """The ``Outcome`` in a task-succeeded event's ``result`` (the repr of an ``outcome``), or
    None for any other result (a plain task's, an expansion's)."""
    if not isinstance(result, str) or len(result) > _OUTCOME_MAX_CHARS:
        return None
    if not result.startswith(_OUTCOME_PREFIX):
        return None
    try:
        value = ast.literal_eval(result)  # literals only, and short: never code
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict) or not set(value) <= _OUTCOME_FIELDS:
        return None
    state, dag_run, seconds = (
        value.get(OUTCOME_KEY),
        value.get("dag_run"),
        value.get("dag_run_seconds"),
    )
    if not (isinstance(state, str) and _STATE_RE.fullmatch(state)):
        return None
    if dag_run is not None and not (isinstance(dag_run, str) and _STATE_RE.fullmatch(dag_run)):
        return None
    if seconds is not None and not (isinstance(seconds, int | float) and seconds >= 0):
        seconds = None
    return Outcome(
        state=state,
        duplicate=value.get("duplicate") is True,
        dag_run=dag_run,
        dag_run_seconds=None if seconds is None else float(seconds),
    )


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


def send_event(event_type: str, **fields: Any) -> None:
    """A custom Celery event from the running task (none outside a task, nothing raised)."""
    _send(event_type, **fields)


def task_run_finished(dag_id: str, task_id: str, state: str, duration: float | None = None) -> None:
    _send(TASK_RUN_FINISHED, dag_id=dag_id, task_id=task_id, state=state, duration=duration)


def dag_run_finished(dag_id: str, state: str, duration: float | None) -> None:
    _send(DAG_RUN_FINISHED, dag_id=dag_id, state=state, duration=duration)
