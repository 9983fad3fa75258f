"""``beatflow.task_value``: the value a DAG task returned, for code that holds only Celery's
handle of it (an ``AsyncResult`` or its task id).

A DAG task's Celery result is its outcome (``{'beatflow_task_run': 'success'}``, which Flower and
the exporter read), not its value: values live in the results DB, as big as
BEATFLOW_RESULT_MAX_BYTES, for as long as the run's history is kept, where Celery's result
backend would hold them in Redis for ``result_expires``. Each task run records the Celery task
id of its latest try; this reads the task run by it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from beatflow.errors import TaskValueError
from beatflow.runtime import Runtime, runtime_of
from beatflow.states import TaskRunState

if TYPE_CHECKING:
    from celery import Celery
    from celery.result import AsyncResult

    from beatflow.store import TaskRunRecord


def task_run_of(task: str | AsyncResult, *, app: Celery | None = None) -> TaskRunRecord:
    """The task run whose latest try is the Celery task ``task`` (an ``AsyncResult`` or a task
    id); TaskValueError when there is none."""
    celery_task_id = task if isinstance(task, str) else str(task.id)
    record = _runtime(task, app).store.get_task_run_by_celery_id(celery_task_id)
    if record is None:
        raise TaskValueError(celery_task_id)
    return record


def task_value(task: str | AsyncResult, *, app: Celery | None = None) -> Any:
    """The value the DAG task run of the Celery task ``task`` returned (what its downstream
    tasks received), read from the results DB.

    ``task`` is an ``AsyncResult`` (``sig.apply_async()``, ``app.AsyncResult(id)``) or a Celery
    task id (Flower's, a ``task-succeeded`` event's). The results DB is the one of ``app``, else
    of the ``AsyncResult``'s app, else of the current Celery app (given beatflow by init_app,
    or ``beatflow.celery``).
    TaskValueError (a LookupError) when no task run's latest try is that Celery task (not a DAG
    or Idempotent task, or a later try replaced it: a replay, a resume) or the task run has not
    succeeded (its state and error say why): the value of a success only, never a guess."""
    record = task_run_of(task, app=app)
    if record.state != TaskRunState.SUCCESS:
        raise TaskValueError(str(record.celery_task_id), record.state, record.error or "")
    return record.result


def _runtime(task: str | AsyncResult, app: Celery | None) -> Runtime:
    candidate = app if app is not None else getattr(task, "app", None)
    if candidate is not None and isinstance(getattr(candidate, "beatflow", None), Runtime):
        return runtime_of(candidate)
    if app is not None:
        return runtime_of(app)  # its TypeError says to call init_app
    from celery import current_app

    # the current app: the one init_app was called on (a project's), or beatflow's own once
    # `beatflow.celery` was built; its TypeError says to call init_app otherwise
    return runtime_of(current_app._get_current_object())
