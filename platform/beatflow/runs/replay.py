"""Replaying a dead letter: its task run goes back to up_for_retry (a new try under the same
dedupe key), so do the downstream task runs that did not succeed because of it; then the DAG
run's canvas is sent again. Task runs that already succeeded are not run again: their claims
return the stored result."""

from __future__ import annotations

from typing import TYPE_CHECKING

from celery import Celery

from beatflow.dag.compile import compile_run
from beatflow.errors import BeatflowError
from beatflow.runtime import runtime_of
from beatflow.runs.lifecycle import send_canvas

if TYPE_CHECKING:
    from beatflow.store import DagRunRecord


def _descendants(down: dict[str, set[str]], task_id: str) -> set[str]:
    out: set[str] = set()
    stack = [task_id]
    while stack:
        for child in down[stack.pop()]:
            if child not in out:
                out.add(child)
                stack.append(child)
    return out


def replay_dead_letter(app: Celery, letter_id: int) -> DagRunRecord:
    runtime = runtime_of(app)
    store = runtime.store
    letter = store.get_dead_letter(letter_id)
    if letter is None:
        raise BeatflowError(f"no dead letter {letter_id}; see `beatflow dlq list`")
    if letter.replayed_at is not None:
        raise BeatflowError(f"dead letter {letter_id} was replayed at {letter.replayed_at}")
    dag = runtime.dag(letter.dag_id)
    downstream = (
        _descendants(dag.downstream_map(), letter.task_id) if letter.task_id in dag.tasks else set()
    )
    for t in store.get_task_runs(letter.dag_id, letter.run_id):
        if t.dedupe_key == letter.dedupe_key or (t.task_id in downstream and t.state != "success"):
            store.reset_task_run(t.dedupe_key)
    store.reopen_dag_run(letter.dag_id, letter.run_id)
    store.mark_dead_letter_replayed(letter_id)
    send_canvas(app, compile_run(app, dag, letter.run_id))
    run = store.get_dag_run(letter.dag_id, letter.run_id)
    assert run is not None
    return run
