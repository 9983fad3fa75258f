"""Closing a DAG run from a task: every way a task closes a run goes through :func:`close`
(``runs.close.close_run``: the run's final state once every task of it is final, the
announcement of its end, its event, the waiting runs started). Two tasks call it:

- a run's closing task (``dag.compile.closing_task``: the one plain task its plan ends with)
  closes the run in process once its own task run is final (``close_here``), with what it
  learned on its way (``Closing``): no Celery hop, often no read of its own;
- ``beatflow.finish_run``, the canvas's last step when the plan ends in parallel work or a
  ``.map()`` (a chord body needs a task of its own), and the closing task's hand-off when the
  results database blipped: Celery retries it while the database is unreachable.

The reconciler (``runs/reconciler.py``) stays the safety net: it closes a run whose task runs
are all final when neither task could."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery import Task as CeleryTask

from beatflow.dag.compile import FINISH_TASK
from beatflow.errors import StoreUnavailableError
from beatflow.execution import events
from beatflow.execution.options import STORE_RETRY_MAX_DELAY, TASK_OPTIONS
from beatflow.runs.close import close_run
from beatflow.runtime import runtime_of

if TYPE_CHECKING:
    from beatflow.runtime import Runtime
    from beatflow.store import DagRunRecord, TaskRunRecord

log = logging.getLogger(__name__)

STORE_AUTORETRY: dict[str, object] = {
    "autoretry_for": (StoreUnavailableError,),
    "retry_backoff": True,
    "retry_backoff_max": int(STORE_RETRY_MAX_DELAY),
    "retry_jitter": True,
}


@dataclass(slots=True)
class Closing:
    """What a run's closing task learns on its way that closing the run can use: every task
    run of the run (``rows``, read with its own; set when the read covered the whole run) and
    its own row once final (``own``)."""

    rows: list[TaskRunRecord] | None = None
    own: TaskRunRecord | None = None
    # the task's own finish also ended the run: the run as it ended, the waiting runs started
    closed: DagRunRecord | None = None
    started: tuple[DagRunRecord, ...] = ()

    def tasks(self) -> list[TaskRunRecord] | None:
        """Every task run of the run as it stands, when known without reading."""
        return None if self.own is None else self.tasks_with(self.own)

    def tasks_with(self, own: TaskRunRecord) -> list[TaskRunRecord] | None:
        """Every task run of the run with ``own`` as the task's own row, when the read covered
        the whole run."""
        if self.rows is None:
            return None
        others = [t for t in self.rows if (t.task_id, t.map_index) != (own.task_id, own.map_index)]
        return [*others, own]

    def note_own(
        self, record: TaskRunRecord, result: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Note the task's own final row (its claim's, in the state it ended in); returns
        ``result``."""
        if result is not None:
            self.own = dataclasses.replace(record, state=result[events.OUTCOME_KEY])
        return result


def close(
    runtime: Runtime,
    dag_id: str,
    run_id: str,
    closing: Closing | None = None,
    on_closed: Callable[[DagRunRecord], None] | None = None,
) -> str:
    """Close the DAG run if every task of it is final (the one way a task closes a run);
    ``closing``: what the closing task already knows. Returns the run's state."""
    if closing is None:
        return close_run(runtime, dag_id, run_id, on_closed=on_closed)
    return close_run(
        runtime,
        dag_id,
        run_id,
        tasks=closing.tasks(),
        on_closed=on_closed,
        closed=closing.closed,
        started=closing.started,
    )


def close_here(
    runtime: Runtime,
    task: CeleryTask,
    dag_id: str,
    run_id: str,
    closing: Closing | None = None,
    result: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Close the DAG run from its closing task, in process; returns ``result`` (the task's
    outcome) with the run's final state added when this call ended the run (Celery's
    task-succeeded event carries both; without a ``result`` the DAG-run event is sent). When
    the results database blipped, send ``beatflow.finish_run`` instead (Celery retries it);
    when even that cannot be sent, or anything else went wrong, the reconciler closes the run
    (its task runs are final)."""
    closed: list[DagRunRecord] = []
    try:
        close(runtime, dag_id, run_id, closing, closed.append if result is not None else None)
        if closed and result is not None:
            run = closed[0]
            return events.outcome(
                result[events.OUTCOME_KEY],
                duplicate=bool(result.get("duplicate")),
                dag_run=run.state,
                dag_run_seconds=run.duration_seconds,
            )
        return result
    except StoreUnavailableError as exc:
        log.warning(
            "could not close DAG run %s/%s in its closing task (%s); sending %s",
            dag_id,
            run_id,
            exc,
            FINISH_TASK,
        )
    except Exception:
        log.exception("could not close DAG run %s/%s; the reconciler closes it", dag_id, run_id)
        return result
    try:
        task.app.send_task(FINISH_TASK, args=(dag_id, run_id), ignore_result=True)
    except Exception:
        log.exception("could not send %s for %s/%s", FINISH_TASK, dag_id, run_id)
    return result


def register(app: Celery) -> None:
    """Register ``beatflow.finish_run`` on ``app``: it closes its run from its task runs'
    states; while the results database is unreachable Celery retries it (``autoretry_for``)
    with exponential backoff and full jitter."""

    @app.task(name=FINISH_TASK, **TASK_OPTIONS, **STORE_AUTORETRY)  # type: ignore[untyped-decorator]
    def finish_run(self: CeleryTask, dag_id: str, run_id: str) -> str:
        return close(runtime_of(self.app), dag_id, run_id)
