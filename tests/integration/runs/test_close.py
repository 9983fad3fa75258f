"""Closing a run happens once: a duplicate closing step (a redelivered finish message, the
reconciler racing the canvas) and a closing step arriving after a cancel change nothing and
call no callback again. A closing step that comes while a task has no final row (none yet,
running, waiting for its retry) leaves the run running."""

from __future__ import annotations

from typing import Any

from celery import Celery

from beatflow.execution.dedupe import default_dedupe_key
from beatflow.runs import close_run
from beatflow.runs.operator import cancel_run
from beatflow.runtime import Runtime, runtime_of
from beatflow.states import DagRunState, TaskRunState


def test_a_run_closed_twice_is_closed_once_and_a_cancelled_run_stays_cancelled(
    app: Celery,
) -> None:
    runtime = runtime_of(app)
    store = runtime.store
    calls: list[dict[str, Any]] = []
    runtime.dag("t_single").on_failure = lambda **kw: calls.append(kw)
    for run_id in ("twice", "cancelled"):
        store.create_dag_run("t_single", run_id, conf={"sleep": 0.0})
        store.force_task_state(
            "t_single", run_id, "step", state="failed", note="boom", dedupe_key=f"k/{run_id}"
        )
    store.start_queued_dag_runs("t_single", 1)
    assert close_run(runtime, "t_single", "twice") == "failed"
    assert close_run(runtime, "t_single", "twice") == "failed"
    assert [c["run_id"] for c in calls] == ["twice"]

    # the next run was dispatched by the first close; cancel it, then its closing step arrives
    cancel_run(runtime, "t_single", "cancelled", actor="test")
    assert close_run(runtime, "t_single", "cancelled") == "cancelled"
    assert [c["run_id"] for c in calls] == ["twice"]


def _claim(runtime: Runtime, run_id: str, task_id: str) -> str:
    key = default_dedupe_key("t_chord", run_id, task_id)
    claim = runtime.store.claim_task_run(
        key, dag_id="t_chord", run_id=run_id, task_id=task_id, worker="test"
    )
    assert claim.outcome == "run" and claim.token
    return claim.token


def _finish(runtime: Runtime, run_id: str, task_id: str, token: str, state: str) -> None:
    key = default_dedupe_key("t_chord", run_id, task_id)
    assert runtime.store.finish_task_run(key, token, state=state, result=1)


def _stays_running(runtime: Runtime, run_id: str) -> None:
    assert close_run(runtime, "t_chord", run_id) == DagRunState.RUNNING
    record = runtime.store.get_dag_run("t_chord", run_id)
    assert record is not None
    assert (record.state, record.ended_at) == (DagRunState.RUNNING, None)


def test_a_run_with_a_task_missing_running_or_up_for_retry_is_not_closed_until_all_are_final(
    app: Celery,
) -> None:
    runtime = runtime_of(app)
    store = runtime.store
    store.create_dag_run("t_chord", "partial")
    store.mark_dag_run_running("t_chord", "partial")
    for task_id in ("p1", "p2", "join"):
        _finish(runtime, "partial", task_id, _claim(runtime, "partial", task_id), "success")

    _stays_running(runtime, "partial")  # (a) tail has no task run at all

    token = _claim(runtime, "partial", "tail")
    _stays_running(runtime, "partial")  # (b) tail is running

    _finish(runtime, "partial", "tail", token, TaskRunState.UP_FOR_RETRY)
    states = {t.task_id: t.state for t in store.get_task_runs("t_chord", "partial")}
    assert states == {"p1": "success", "p2": "success", "join": "success", "tail": "up_for_retry"}
    _stays_running(runtime, "partial")  # (c) tail waits for its retry, the others succeeded

    _finish(runtime, "partial", "tail", _claim(runtime, "partial", "tail"), "success")
    assert close_run(runtime, "t_chord", "partial") == DagRunState.SUCCESS
    record = store.get_dag_run("t_chord", "partial")
    assert record is not None and record.state == DagRunState.SUCCESS
    assert record.ended_at is not None


def test_a_closing_task_closes_with_the_rows_it_holds_and_reads_afresh_when_they_are_stale(
    app: Celery,
) -> None:
    runtime = runtime_of(app)
    store = runtime.store
    store.create_dag_run("t_chord", "held")
    store.mark_dag_run_running("t_chord", "held")
    for task_id in ("p1", "p2", "join"):
        _finish(runtime, "held", task_id, _claim(runtime, "held", task_id), "success")
    stale = store.get_task_runs("t_chord", "held")  # tail has no row in this copy
    _finish(runtime, "held", "tail", _claim(runtime, "held", "tail"), "success")
    closed: list[object] = []
    # the copy says "not final": the rows are read again, and the run closes all the same
    assert close_run(runtime, "t_chord", "held", tasks=stale, on_closed=closed.append) == (
        DagRunState.SUCCESS
    )
    assert [getattr(r, "state", None) for r in closed] == [DagRunState.SUCCESS]

    # a complete copy is trusted: a failed row in it fails the run (the database says success)
    store.create_dag_run("t_chord", "trusted")
    store.mark_dag_run_running("t_chord", "trusted")
    for task_id in ("p1", "p2", "join", "tail"):
        _finish(runtime, "trusted", task_id, _claim(runtime, "trusted", task_id), "success")
    rows = store.get_task_runs("t_chord", "trusted")
    import dataclasses

    copy = [dataclasses.replace(t, state="failed") if t.task_id == "tail" else t for t in rows]
    assert close_run(runtime, "t_chord", "trusted", tasks=copy) == DagRunState.FAILED
