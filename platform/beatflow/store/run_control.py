"""What operators (and the reconciler) do to the task runs of one DAG run: cancel the
unfinished ones, reset chosen ones for a clear (a new try under the same dedupe key), force one
task's state (mark). What they did is recorded in the audit table (``audit``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlalchemy as sa

from beatflow.store.base import StoreBase
from beatflow.store.engine import utcnow
from beatflow.store.models import task_runs
from beatflow.store.records import (
    TASK_CANCELLED,
    TASK_RUN_TERMINAL_STATES,
    TASK_UP_FOR_RETRY,
    TaskRunRecord,
)
from beatflow.store.rows import task_run_record

t = task_runs.c


def _of_run(dag_id: str, run_id: str) -> sa.ColumnElement[bool]:
    return sa.and_(t.dag_id == dag_id, t.run_id == run_id)


class RunControlMixin(StoreBase):
    def cancel_task_runs(self, dag_id: str, run_id: str, *, reason: str) -> list[TaskRunRecord]:
        """Every task run of the run that is not final becomes ``cancelled`` (its lease is
        dropped, so a worker still running it cannot record an outcome); returns them as they
        are now (their Celery task ids are what to revoke)."""
        unfinished = sa.and_(_of_run(dag_id, run_id), t.state.notin_(TASK_RUN_TERMINAL_STATES))
        update = (
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
        with self._write(f"cancelling the task runs of {dag_id}/{run_id}") as conn:
            return [task_run_record(r) for r in conn.execute(update).mappings()]

    def reset_task_runs(
        self,
        dag_id: str,
        run_id: str,
        task_ids: Collection[str],
        *,
        states: Collection[str] = TASK_RUN_TERMINAL_STATES,
    ) -> list[TaskRunRecord]:
        """For a clear: final task runs of ``task_ids`` (only those in ``states``) go back to
        up_for_retry, so the next claim runs each as a new try under its dedupe key. Returns
        the task runs reset, as they were before."""
        wanted = sorted(set(states) & set(TASK_RUN_TERMINAL_STATES))
        where = sa.and_(
            _of_run(dag_id, run_id), t.task_id.in_(sorted(task_ids)), t.state.in_(wanted)
        )
        update = (
            sa.update(task_runs)
            .where(where)
            .values(state=TASK_UP_FOR_RETRY, lease_token=None, lease_expires_at=None)
            .returning(*task_runs.c)
        )
        with self._write(f"clearing task runs of {dag_id}/{run_id}") as conn:
            return [task_run_record(r) for r in conn.execute(update).mappings()]

    def force_task_state(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        *,
        state: str,
        note: str,
        dedupe_key: str,
    ) -> int:
        """Mark: every task run of ``task_id`` in the run (each map instance) takes ``state``,
        whatever it was (a worker still running it loses its lease); a task that has no task
        run yet gets one under ``dedupe_key``. Returns how many task runs were written."""
        now = utcnow()
        values: dict[str, Any] = {
            "state": state,
            "error": note,
            "ended_at": now,
            "lease_token": None,
            "lease_expires_at": None,
        }
        with self._write(f"marking {dag_id}/{run_id}/{task_id} {state}", transaction=True) as conn:
            updated = conn.execute(
                sa.update(task_runs)
                .where(_of_run(dag_id, run_id), t.task_id == task_id)
                .values(**values)
                .returning(t.id)
            ).all()
            if updated:
                return len(updated)
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
            return len(conn.execute(insert).all())
