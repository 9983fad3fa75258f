"""The operator's verbs on a DAG run — cancel, clear, mark — as the CLI, the web API and the UI
call them. Each checks that the run exists and that the verb applies to its state
(RunNotFoundError, RunStateError otherwise), makes its change with conditional updates and
records who did it, when and why in the audit table in the same transaction (both commit, or
neither), and returns the run as it is afterwards. A cleared task runs again with its full retry
policy; marking a run closes its dead letters, so no replay of one undoes the mark."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from beatflow.dag import graph
from beatflow.errors import BeatflowError, RunNotFoundError, RunStateError, UnknownTaskError
from beatflow.runs.close import run_outcome
from beatflow.runs.dispatch import dispatch_quietly, send_run
from beatflow.runtime import Runtime
from beatflow.states import (
    DAG_RUN_ACTIVE,
    DAG_RUN_FINAL,
    TASK_RUN_FAILED,
    DagRunState,
    TaskRunState,
)
from beatflow.store.records import AuditNote

if TYPE_CHECKING:
    from beatflow.dag.model import DAG
    from beatflow.store import DagRunRecord, TaskRunRecord

log = logging.getLogger(__name__)

MARK_STATES = frozenset({DagRunState.SUCCESS, DagRunState.FAILED})


def cancel_run(
    runtime: Runtime,
    dag_id: str,
    run_id: str,
    *,
    actor: str,
    reason: str = "",
    terminate: bool = False,
) -> DagRunRecord:
    """A queued or running run becomes ``cancelled``: its unfinished task runs are cancelled
    (a worker still running one cannot record an outcome), their messages revoked (the running
    ones terminated with ``terminate``), and its max_active_runs slot goes to the next run."""
    run = _get(runtime, dag_id, run_id)
    why = _why("cancelled", actor, reason)
    note = AuditNote(
        actor, "cancel", {"reason": reason, "terminate": terminate, "from_state": run.state}
    )
    ended: DagRunRecord | None = None
    cancelled: list[TaskRunRecord] = []
    if run.state not in DAG_RUN_FINAL:
        ended, cancelled = runtime.store.end_dag_run_by_hand(
            dag_id, run_id, to=DagRunState.CANCELLED, from_states=DAG_RUN_ACTIVE, reason=why,
            audit=note,
        )  # fmt: skip
    if ended is None:
        current = _get(runtime, dag_id, run_id)
        raise RunStateError(dag_id, run_id, current.state, "cancel", "it has already ended")
    revoke_task_runs(runtime, cancelled, terminate=terminate)
    log.warning("DAG run %s/%s %s", dag_id, run_id, why, extra={"dag_id": dag_id, "run_id": run_id})
    _dispatch(runtime, dag_id)
    return _get(runtime, dag_id, run_id)


def clear_run(
    runtime: Runtime,
    dag_id: str,
    run_id: str,
    *,
    tasks: Sequence[str] = (),
    downstream: bool = False,
    only_failed: bool = False,
    actor: str,
    reason: str = "",
) -> DagRunRecord:
    """Run task runs again, each as a new try under its dedupe key (its side effects happen
    again, on purpose): those of ``tasks`` (all the DAG's when empty), with their downstream
    tasks if asked, only the failed ones (failed, upstream_failed, cancelled) if asked. A run
    that had ended goes back to queued and runs again as soon as max_active_runs allows; a
    running run gets its canvas again."""
    run = _get(runtime, dag_id, run_id)
    dag = runtime.dag(dag_id)
    chosen = _task_ids(dag, tasks)
    if downstream:
        chosen |= downstream_of(dag, chosen)
    if run.state == DagRunState.QUEUED:
        raise RunStateError(dag_id, run_id, run.state, "clear", "it has not started yet")
    states = TASK_RUN_FAILED if only_failed else frozenset(TaskRunState)
    note = AuditNote(
        actor,
        "clear",
        {
            "reason": reason,
            "tasks": sorted(tasks),
            "downstream": downstream,
            "only_failed": only_failed,
            "from_state": run.state,
        },
    )
    reset = runtime.store.reset_task_runs(
        dag_id, run_id, chosen, states=states, note=_why("cleared", actor, reason), audit=note
    )
    if not reset:
        which = "failed task runs" if only_failed else "finished task runs"
        raise RunStateError(
            dag_id, run_id, run.state, "clear", f"no {which} of {', '.join(sorted(chosen))}"
        )
    log.warning(
        "DAG run %s/%s: %d task runs cleared by %s",
        dag_id,
        run_id,
        len(reset),
        actor,
        extra={"dag_id": dag_id, "run_id": run_id},
    )
    if runtime.store.transition_dag_run(
        dag_id, run_id, to=DagRunState.QUEUED, from_states=DAG_RUN_FINAL
    ):
        _dispatch(runtime, dag_id)
    else:
        _send(runtime, dag_id, run_id)  # still running: its canvas may be past those tasks
    return _get(runtime, dag_id, run_id)


def mark_run(
    runtime: Runtime,
    dag_id: str,
    run_id: str,
    *,
    state: str,
    task_id: str | None = None,
    actor: str,
    reason: str = "",
) -> DagRunRecord:
    """Set a state by hand. Without ``task_id`` the run takes ``state`` (success or failed),
    its unfinished task runs are cancelled and its open dead letters closed (a replay of one
    would undo the mark); with it, every task run of that task (every map instance) takes it,
    its letters are closed, and a run that had ended is judged again from its task runs."""
    if state not in MARK_STATES:
        raise RunStateError(
            dag_id, run_id, "?", "mark", f"state must be success or failed, not {state!r}"
        )
    run = _get(runtime, dag_id, run_id)
    why = _why(f"marked {state}", actor, reason)
    detail: dict[str, object] = {"reason": reason, "state": state, "from_state": run.state}
    if task_id is None:
        ended: DagRunRecord | None = None
        cancelled: list[TaskRunRecord] = []
        if run.state != state:
            ended, cancelled = runtime.store.end_dag_run_by_hand(
                dag_id, run_id, to=state, from_states=set(DagRunState) - {state}, reason=why,
                audit=AuditNote(actor, "mark", detail), close_letters=True,
            )  # fmt: skip
        if ended is None:
            raise RunStateError(dag_id, run_id, run.state, "mark", f"it is {state} already")
        revoke_task_runs(runtime, cancelled, terminate=False)
        _dispatch(runtime, dag_id)
        return _get(runtime, dag_id, run_id)
    dag = runtime.dag(dag_id)
    _task_ids(dag, [task_id])
    from beatflow.execution.dedupe import default_dedupe_key

    detail["task_id"] = task_id
    runtime.store.force_task_state(
        dag_id,
        run_id,
        task_id,
        state=state,
        note=why,
        dedupe_key=default_dedupe_key(dag_id, run_id, task_id),
        audit=AuditNote(actor, "mark", detail),
    )
    if run.state in DAG_RUN_FINAL:  # judged again: a consequence of the mark, with its note
        outcome = run_outcome(dag, runtime.store.get_task_runs(dag_id, run_id))
        if outcome is not None and outcome != run.state:
            runtime.store.transition_dag_run(
                dag_id, run_id, to=outcome, from_states={run.state}, reason=why
            )
    return _get(runtime, dag_id, run_id)


def revoke_task_runs(
    runtime: Runtime, records: Iterable[TaskRunRecord], *, terminate: bool
) -> None:
    """Revoke the Celery messages of these task runs (a retry waiting in the broker, a task
    still running); terminate the running ones with ``terminate``. Best effort: the task runs
    are already final in the database, so a worker that still gets one cannot record it."""
    ids = sorted({r.celery_task_id for r in records if r.celery_task_id})
    if not ids:
        return
    try:
        runtime.app.control.revoke(ids, terminate=terminate, signal="SIGTERM")
    except Exception as exc:  # noqa: BLE001 - the run is cancelled in the database already
        log.warning("could not revoke %d task messages: %s", len(ids), exc)


def _get(runtime: Runtime, dag_id: str, run_id: str) -> DagRunRecord:
    run = runtime.store.get_dag_run(dag_id, run_id)
    if run is None:
        raise RunNotFoundError(dag_id, run_id)
    return run


def _why(what: str, actor: str, reason: str) -> str:
    return f"{what} by {actor}" + (f": {reason}" if reason else "")


def _task_ids(dag: DAG, tasks: Iterable[str]) -> set[str]:
    chosen = set(tasks) or set(dag.tasks)
    unknown = sorted(chosen - set(dag.tasks))
    if unknown:
        raise UnknownTaskError(dag.dag_id, unknown[0], list(dag.tasks))
    return chosen


def downstream_of(dag: DAG, roots: Iterable[str]) -> set[str]:
    """Every task downstream of ``roots`` (their children, theirs, and so on), ``roots``
    excepted unless one is downstream of another: what a clear with ``downstream`` and a
    dead letter's replay run again."""
    return graph.descendants(dag, roots)


def _dispatch(runtime: Runtime, dag_id: str) -> None:
    try:
        dispatch_quietly(runtime, dag_id)
    except BeatflowError as exc:  # the DAG is not loaded here: the reconciler dispatches it
        log.warning("not dispatching runs of %s now: %s", dag_id, exc)


def _send(runtime: Runtime, dag_id: str, run_id: str) -> None:
    try:
        send_run(runtime, dag_id, run_id)
    except BeatflowError as exc:  # back to queued: the reconciler sends it
        log.warning("%s", exc)
