"""Closing a DAG run: its final state from its task runs (once every task has a final row), the
announcement and event of its end, the DAG's callbacks (``notify.callbacks``), and the dispatch
of the runs waiting for its slot."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from beatflow.errors import BeatflowError, RunNotFoundError
from beatflow.execution import announce, decide, events, rules
from beatflow.notify import callbacks
from beatflow.runs.dispatch import dispatch_quietly, send_quietly
from beatflow.runtime import Runtime
from beatflow.states import DAG_RUN_ACTIVE, DagRunState

if TYPE_CHECKING:
    from beatflow.dag.model import DAG
    from beatflow.store import DagRunRecord, TaskRunRecord

log = logging.getLogger(__name__)


def close_run(
    runtime: Runtime,
    dag_id: str,
    run_id: str,
    *,
    tasks: Sequence[TaskRunRecord] | None = None,
    on_closed: Callable[[DagRunRecord], None] | None = None,
    closed: DagRunRecord | None = None,
    started: Sequence[DagRunRecord] = (),
) -> str:
    """The canvas's last step (and the reconciler's): set the DAG run's final state once every
    task of it has a final row, then start waiting runs. A run that is not final yet is left
    running (the reconciler resumes it if its canvas is gone); returns the run's state.

    ``tasks``: every task run of the run as the caller (the closing task) already holds them;
    they are read afresh when they do not make the run final. ``on_closed``: called with the
    run this call ended instead of sending the DAG-run event (the closing task reports it in
    its own task-succeeded event). ``closed``: the run as the closing task's own finish ended
    it (``store.finish_and_close``), and ``started`` the waiting runs that call started:
    nothing is left to write, only what follows a close, and those runs to send."""
    store = runtime.store
    try:
        dag = runtime.dag(dag_id)
    except BeatflowError:
        dag = None
    if closed is not None:
        return _closed(runtime, dag, closed, on_closed, started=started)
    state = run_outcome(dag, tasks) if tasks is not None else None
    if state is None:
        state = run_outcome(dag, store.get_task_runs(dag_id, run_id))
    if state is None:
        log.info(
            "DAG run %s/%s not closed: some of its tasks are not final",
            dag_id,
            run_id,
            extra={"dag_id": dag_id, "run_id": run_id},
        )
        current = store.get_dag_run(dag_id, run_id)
        return current.state if current is not None else DagRunState.RUNNING
    record = store.transition_dag_run_returning(
        dag_id, run_id, to=state, from_states=DAG_RUN_ACTIVE
    )
    if record is None:  # ended already: cancelled, marked, or closed by a duplicate closing step
        current = store.get_dag_run(dag_id, run_id)
        if current is None:
            raise RunNotFoundError(dag_id, run_id)
        return current.state
    return _closed(runtime, dag, record, on_closed)


def _closed(
    runtime: Runtime,
    dag: DAG | None,
    record: DagRunRecord,
    on_closed: Callable[[DagRunRecord], None] | None,
    *,
    started: Sequence[DagRunRecord] | None = None,
) -> str:
    """What follows a DAG run's end: the announcement, the log line, its event (or
    ``on_closed``), the DAG's callbacks and notifiers, and the dispatch of waiting runs (or, when
    the close already started them, ``started``: sending them)."""
    dag_id, run_id = record.dag_id, record.run_id
    if record.followed:  # someone listens (migration 0013): wake it
        announce.announce_end(runtime.app, record)
    log.info(
        "DAG run %s/%s finished: %s in %.3fs",
        dag_id,
        run_id,
        record.state,
        record.duration_seconds or 0.0,
        extra={"dag_id": dag_id, "run_id": run_id},
    )
    if on_closed is not None:
        on_closed(record)
    else:
        events.dag_run_finished(dag_id, record.state, record.duration_seconds)
    if dag is None:
        return record.state
    callbacks.dag_event(runtime, dag, record)  # its callbacks, now that its end is committed
    if started is None:
        dispatch_quietly(runtime, dag_id)
    else:
        send_quietly(runtime, dag_id, started)
    return record.state


def run_outcome(dag: DAG | None, tasks: Sequence[TaskRunRecord]) -> DagRunState | None:
    """The final state of a run from its task runs, or None while any task (any map instance)
    of the DAG has no final row. Without the DAG (not loaded here) only the rows count."""
    if dag is None:
        return rules.dag_run_state([t.state for t in tasks])
    expected = {task_id: spec.map_over is not None for task_id, spec in dag.tasks.items()}
    return decide.run_outcome(expected, tasks, quiet_tasks(dag))


def quiet_tasks(dag: DAG) -> list[str]:
    """The tasks whose failure does not fail the run (teardowns: ``TaskSpec.fails_run``)."""
    return [task_id for task_id, spec in dag.tasks.items() if not spec.fails_run]
