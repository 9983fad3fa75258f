"""Replaying a dead letter: in one transaction its task run (still ``failed``) goes back to
up_for_retry (a new try under the same dedupe key), so do the downstream task runs that did not
succeed because of it; then the DAG run's canvas is sent again. Task runs that already succeeded
are not run again: their claims return the stored result."""

from __future__ import annotations

from typing import TYPE_CHECKING

from beatflow.dag.compile import compile_run
from beatflow.runs.dispatch import send_canvas
from beatflow.runs.operator import downstream_of
from beatflow.runtime import Runtime

if TYPE_CHECKING:
    from beatflow.store import DagRunRecord


def replay_dead_letter(
    runtime: Runtime, letter_id: int, *, actor: str | None = None, reason: str = ""
) -> DagRunRecord:
    """Replay dead letter ``letter_id``; raises BeatflowError (changing nothing) if it is
    unknown, replayed already, or its task run is no longer failed. ``actor``: the operator who
    asked, recorded in the audit table (with ``reason`` when one is given)."""
    store = runtime.store
    letter = store.get_dead_letter(letter_id)
    downstream: set[str] = set()
    if letter is not None:
        dag = runtime.dag(letter.dag_id)
        if letter.task_id in dag.tasks:
            downstream = downstream_of(dag, [letter.task_id])
    letter = store.start_replay(letter_id, downstream)
    dag = runtime.dag(letter.dag_id)
    store.reopen_dag_run(letter.dag_id, letter.run_id)
    if actor is not None:
        detail: dict[str, object] = {"dead_letter": letter_id}
        if reason:
            detail["reason"] = reason
        store.record_audit(actor, "replay", letter.dag_id, letter.run_id, detail)
    send_canvas(runtime.app, compile_run(runtime.app, dag, letter.run_id))
    run = store.get_dag_run(letter.dag_id, letter.run_id)
    assert run is not None
    return run
