"""Replaying a dead letter: in one transaction its task run (still ``failed``) becomes
``cleared`` (new tries under the same dedupe key, with the task's full retry policy), so do the
downstream task runs that did not succeed because of it, and the operator's audit record is
written; then the DAG run's canvas is sent again. Task runs that already succeeded are not run
again: their claims return the stored result. A stale letter (closed when its run was marked,
its task cleared, or a newer letter written) is refused with the reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from beatflow.dag.compile import compile_run
from beatflow.runs.dispatch import send_canvas
from beatflow.runs.operator import downstream_of
from beatflow.runtime import Runtime
from beatflow.store.records import AuditNote

if TYPE_CHECKING:
    from beatflow.store import DagRunRecord


def replay_dead_letter(
    runtime: Runtime, letter_id: int, *, actor: str | None = None, reason: str = ""
) -> DagRunRecord:
    """Replay dead letter ``letter_id``; raises BeatflowError (changing nothing) if it is
    unknown, replayed already, stale (DeadLetterStaleError, with the reason it was closed), or
    its task run is no longer failed. ``actor``: the operator who asked, recorded in the audit
    table in the replay's transaction (with ``reason`` when one is given)."""
    store = runtime.store
    letter = store.get_dead_letter(letter_id)
    downstream: set[str] = set()
    if letter is not None:
        dag = runtime.dag(letter.dag_id)
        if letter.task_id in dag.tasks:
            downstream = downstream_of(dag, [letter.task_id])
    note = None
    if actor is not None:
        note = AuditNote(actor, "replay", {"reason": reason} if reason else {})
    letter = store.start_replay(letter_id, downstream, audit=note)
    dag = runtime.dag(letter.dag_id)
    store.reopen_dag_run(letter.dag_id, letter.run_id)
    send_canvas(runtime.app, compile_run(runtime.app, dag, letter.run_id))
    run = store.get_dag_run(letter.dag_id, letter.run_id)
    assert run is not None
    return run
