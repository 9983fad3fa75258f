"""Replaying a dead letter: in one transaction its task run (still ``failed``) goes back to
up_for_retry (a new try under the same dedupe key), so do the downstream task runs that did not
succeed because of it; then the DAG run's canvas is sent again. Task runs that already succeeded
are not run again: their claims return the stored result."""

from __future__ import annotations

from typing import TYPE_CHECKING

from celery import Celery

from beatflow.dag.compile import compile_run
from beatflow.runs.lifecycle import send_canvas
from beatflow.runtime import runtime_of

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
    """Replay dead letter ``letter_id``; raises BeatflowError (changing nothing) if it is
    unknown, replayed already, or its task run is no longer failed."""
    runtime = runtime_of(app)
    store = runtime.store
    letter = store.get_dead_letter(letter_id)
    downstream: set[str] = set()
    if letter is not None:
        dag = runtime.dag(letter.dag_id)
        if letter.task_id in dag.tasks:
            downstream = _descendants(dag.downstream_map(), letter.task_id)
    letter = store.start_replay(letter_id, downstream)
    dag = runtime.dag(letter.dag_id)
    store.reopen_dag_run(letter.dag_id, letter.run_id)
    send_canvas(app, compile_run(app, dag, letter.run_id))
    run = store.get_dag_run(letter.dag_id, letter.run_id)
    assert run is not None
    return run
