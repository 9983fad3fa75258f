"""What operators (and the reconciler) do to the task runs of one DAG run: cancel the
unfinished ones, reset chosen ones for a clear (new tries under the same dedupe key, with the
task's full retry policy), force one task's state (mark). An operator's verb writes its audit
record (``audit``) in the transaction of its change, so both commit or neither; marking and
clearing close the dead letters they make stale in that transaction too."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlalchemy as sa

from beatflow.store.audit import audit_insert
from beatflow.store.base import StoreBase
from beatflow.store.dead_letters import close_open_letters
from beatflow.store.engine import utcnow
from beatflow.store.models import dead_letters, task_runs
from beatflow.store.records import (
    TASK_CANCELLED,
    TASK_CLEARED,
    TASK_RUN_TERMINAL_STATES,
    AuditNote,
    DagRunRecord,
    TaskRunRecord,
)
from beatflow.store.rows import dag_run_record, task_run_record
from beatflow.store.sql import transition_statement

t = task_runs.c
d = dead_letters.c


def _of_run(dag_id: str, run_id: str) -> sa.ColumnElement[bool]:
    return sa.and_(t.dag_id == dag_id, t.run_id == run_id)


def _cancel_unfinished(dag_id: str, run_id: str, reason: str) -> sa.Executable:
    """Every task run of the run that is not final becomes ``cancelled`` (its lease dropped)."""
    unfinished = sa.and_(_of_run(dag_id, run_id), t.state.notin_(TASK_RUN_TERMINAL_STATES))
    return (
        sa.update(task_runs)
        .where(unfinished)
        .values(
            state=TASK_CANCELLED,
            error=reason,
            ended_at=utcnow(),
            lease_token=None,
            lease_expires_at=None,
        )
        .returning(*task_runs.c)
    )


class RunControlMixin(StoreBase):
    def cancel_task_runs(self, dag_id: str, run_id: str, *, reason: str) -> list[TaskRunRecord]:
        """Every task run of the run that is not final becomes ``cancelled`` (its lease is
        dropped, so a worker still running it cannot record an outcome); returns them as they
        are now (their Celery task ids are what to revoke)."""
        with self._write(f"cancelling the task runs of {dag_id}/{run_id}") as conn:
            cancelled = conn.execute(_cancel_unfinished(dag_id, run_id, reason)).mappings()
            return [task_run_record(r) for r in cancelled]

    def end_dag_run_by_hand(
        self,
        dag_id: str,
        run_id: str,
        *,
        to: str,
        from_states: Collection[str],
        reason: str,
        audit: AuditNote,
        close_letters: bool = False,
    ) -> tuple[DagRunRecord | None, list[TaskRunRecord]]:
        """An operator ends a run (cancel, mark): in one transaction the run moves from one of
        ``from_states`` to ``to`` (final), its unfinished task runs are cancelled, its open dead
        letters are closed with ``reason`` when ``close_letters`` (a mark: a replay of one would
        undo it), and ``audit`` is written with what was cancelled and closed. Returns the run
        as it is now and the task runs cancelled; (None, []) and nothing written when the run
        was not in ``from_states``."""
        with self._write(f"ending DAG run {dag_id}/{run_id} by hand", transaction=True) as conn:
            row = (
                conn.execute(
                    transition_statement(dag_id, run_id, to, from_states, utcnow(), reason)
                )
                .mappings()
                .first()
            )
            if row is None:
                return None, []
            run = dag_run_record(row)
            cancelled = [
                task_run_record(r)
                for r in conn.execute(_cancel_unfinished(dag_id, run_id, reason)).mappings()
            ]
            more: dict[str, Any] = {"task_runs_cancelled": [c.dedupe_key for c in cancelled]}
            if close_letters:
                closed = conn.execute(
                    close_open_letters(sa.and_(d.dag_id == dag_id, d.run_id == run_id), reason)
                ).all()
                more["dead_letters_closed"] = sorted(int(c.id) for c in closed)
            conn.execute(audit_insert(audit, dag_id, run_id, **more))
            return run, cancelled

    def reset_task_runs(
        self,
        dag_id: str,
        run_id: str,
        task_ids: Collection[str],
        *,
        states: Collection[str] = TASK_RUN_TERMINAL_STATES,
        note: str | None = None,
        audit: AuditNote | None = None,
    ) -> list[TaskRunRecord]:
        """For a clear: final task runs of ``task_ids`` (only those in ``states``) become
        ``cleared``: the next claim runs each as a new try under its dedupe key, and the retry
        policy counts its tries afresh from there (``tries_before``). ``note`` (who cleared it,
        why) replaces their error; their open dead letters are closed with it. ``audit``: the
        operator's record, written in the same transaction with the task runs cleared. Returns
        the task runs reset, as they were before (nothing is written when there are none)."""
        wanted = sorted(set(states) & set(TASK_RUN_TERMINAL_STATES))
        where = sa.and_(
            _of_run(dag_id, run_id), t.task_id.in_(sorted(task_ids)), t.state.in_(wanted)
        )
        before = sa.select(task_runs).where(where).with_for_update()
        values: dict[str, Any] = {
            "state": TASK_CLEARED,
            "tries_before": t.try_number,
            "lease_token": None,
            "lease_expires_at": None,
        }
        if note is not None:
            values["error"] = note
        with self._write(f"clearing task runs of {dag_id}/{run_id}", transaction=True) as conn:
            reset = [task_run_record(r) for r in conn.execute(before).mappings()]
            if not reset:
                return []
            keys = [r.dedupe_key for r in reset]
            conn.execute(sa.update(task_runs).where(t.dedupe_key.in_(keys)).values(**values))
            closed = conn.execute(
                close_open_letters(d.dedupe_key.in_(keys), note or "its task run was cleared")
            ).all()
            if audit is not None:
                conn.execute(
                    audit_insert(
                        audit,
                        dag_id,
                        run_id,
                        task_runs_cleared=keys,
                        dead_letters_closed=sorted(int(c.id) for c in closed),
                    )
                )
            return reset

    def force_task_state(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        *,
        state: str,
        note: str,
        dedupe_key: str,
        audit: AuditNote | None = None,
    ) -> int:
        """Mark: every task run of ``task_id`` in the run (each map instance) takes ``state``,
        whatever it was (a worker still running it loses its lease); a task that has no task
        run yet gets one under ``dedupe_key``. Their open dead letters are closed with ``note``
        (a replay would undo the mark). ``audit``: the operator's record, written in the same
        transaction. Returns how many task runs were written."""
        now = utcnow()
        values: dict[str, Any] = {
            "state": state,
            "error": note,
            "ended_at": now,
            "lease_token": None,
            "lease_expires_at": None,
        }
        with self._write(f"marking {dag_id}/{run_id}/{task_id} {state}", transaction=True) as conn:
            written = len(
                conn.execute(
                    sa.update(task_runs)
                    .where(_of_run(dag_id, run_id), t.task_id == task_id)
                    .values(**values)
                    .returning(t.id)
                ).all()
            )
            if not written:
                insert = (
                    self._insert(task_runs)
                    .values(
                        dedupe_key=dedupe_key,
                        dag_id=dag_id,
                        run_id=run_id,
                        task_id=task_id,
                        map_index=-1,
                        try_number=0,
                        **values,
                    )
                    .on_conflict_do_nothing(index_elements=["dedupe_key"])
                    .returning(t.id)
                )
                written = len(conn.execute(insert).all())
            of_task = sa.and_(d.dag_id == dag_id, d.run_id == run_id, d.task_id == task_id)
            closed = conn.execute(close_open_letters(of_task, note)).all()
            if audit is not None:
                conn.execute(
                    audit_insert(
                        audit,
                        dag_id,
                        run_id,
                        task_runs_marked=written,
                        dead_letters_closed=sorted(int(c.id) for c in closed),
                    )
                )
            return written
