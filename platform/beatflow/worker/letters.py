"""Failure letters: how a task run that failed for good leaves the worker. Its row is written
``failed`` with its dead letter (one transaction), its fan-in counts it, and its canvas goes on
so downstream trigger rules decide (``record_final_failure``). ``fail_unrun`` is the one copy
of that block for a task run beatflow could not run at all (deploy skew, a broken DAG)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery import Task as CeleryTask

from beatflow.execution import canvas, events
from beatflow.execution.dedupe import default_dedupe_key
from beatflow.store import DeadLetterDraft

if TYPE_CHECKING:
    from beatflow.runtime import Runtime

log = logging.getLogger(__name__)


def unrun_letter(run_id: str, index: int) -> DeadLetterDraft:
    """The dead letter of a task run that never ran (no conf, no tries): ``beatflow dlq
    replay`` runs it again once its cause is gone (the rollout finished, the DAG fixed)."""
    return DeadLetterDraft(args={"run_id": run_id, "map_index": index}, conf={}, tries=0)


def fail_unrun(
    runtime: Runtime,
    dag_id: str,
    run_id: str,
    task_id: str,
    index: int,
    error: str,
    traceback: str | None = None,
) -> bool:
    """Record a task run beatflow could not run as failed with ``error``, whatever lease it had
    (a conditional update), with its dead letter; count it in its fan-in and continue what
    follows when it was the last instance to end. True if this call wrote it."""
    key = default_dedupe_key(dag_id, run_id, task_id, index)
    ended = runtime.store.fail_task_run(
        key,
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=index,
        error=error,
        traceback=traceback,
        letter=unrun_letter(run_id, index),
    )
    events.task_run_finished(dag_id, task_id, "failed")
    if ended.fan_in is not None:
        continue_fan_in(runtime.app, ended.fan_in, f"task run {key}")
    return bool(ended.written)


def record_final_failure(task: CeleryTask, exc: BaseException) -> None:
    """THE final-failure path of the worker, the one place a task run that failed for good
    (already recorded ``failed`` in the store) is handed back to Celery: its canvas goes on (so
    downstream trigger rules decide) and ``exc`` is raised, so Celery records FAILURE (see
    ``execution/canvas.py``). Every final failure (the task's last try, a result that cannot be
    stored, a worker lost too often, a broken DAG on this worker) ends here."""
    canvas.fail_for_good(task, exc)


def continue_fan_in(app: Celery, fan_in: dict[str, Any], what: str) -> None:
    """``what`` (a .map() instance) was the last of its expansion to end: send what follows
    the expander. If that cannot be sent now, the run goes silent and the reconciler resumes
    it: the redelivered expander finds every instance ended and continues (``fan_out``)."""
    try:
        canvas.continue_captured(app, fan_in)
    except Exception:
        log.exception(
            "%s was the last of its .map() to end but could not send what follows it; the "
            "reconciler resumes the run",
            what,
        )
