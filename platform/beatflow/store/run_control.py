"""What operators (and the reconciler) do to the task runs of one DAG run: cancel the
unfinished ones, reset chosen ones for a clear (a new try under the same dedupe key), force one
task's state (mark); and the audit table that records who did what, when and why."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.store.base import StoreBase
from beatflow.store.engine import require_aware, utcnow
from beatflow.store.models import audit_events, task_runs
from beatflow.store.records import (
    TASK_CANCELLED,
    TASK_RUN_TERMINAL_STATES,
    TASK_UP_FOR_RETRY,
    AuditRecord,
    TaskRunRecord,
)
from beatflow.store.rows import task_run_record
from beatflow.store.sql import check_conf

t = task_runs.c


def _of_run(dag_id: str, run_id: str) -> sa.ColumnElement[bool]:
    return sa.and_(t.dag_id == dag_id, t.run_id == run_id)


def audit_record(row: sa.RowMapping) -> AuditRecord:
    return AuditRecord(
        id=row["id"],
        at=row["at"],
        actor=row["actor"],
        action=row["action"],
        dag_id=row["dag_id"],
        run_id=row["run_id"],
        detail=dict(row["detail"] or {}),
    )


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

    # ------------------------------------------------------------------ audit

    def record_audit(
        self,
        actor: str,
        action: str,
        dag_id: str | None = None,
        run_id: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> AuditRecord:
        """Record that ``actor`` did ``action`` (to a DAG, a run), with a JSON ``detail``."""
        values = {
            "at": utcnow(),
            "actor": actor[:250],
            "action": action[:50],
            "dag_id": dag_id,
            "run_id": run_id,
            "detail": check_conf(detail, f"audit detail of {action}"),
        }
        with self._write(f"recording {action} by {actor}") as conn:
            row = (
                conn.execute(self._insert(audit_events).values(**values).returning(*audit_events.c))
                .mappings()
                .one()
            )
        return audit_record(row)

    def list_audit(
        self,
        dag_id: str | None = None,
        run_id: str | None = None,
        *,
        action: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Audit records, newest first, filtered by DAG, run, action and time."""
        a = audit_events.c
        query = sa.select(audit_events).order_by(a.id.desc()).limit(max(0, limit))
        if dag_id is not None:
            query = query.where(a.dag_id == dag_id)
        if run_id is not None:
            query = query.where(a.run_id == run_id)
        if action is not None:
            query = query.where(a.action == action)
        if since is not None:
            query = query.where(a.at >= require_aware(since, "since"))
        with self._read("listing audit records") as conn:
            return [audit_record(r) for r in conn.execute(query).mappings()]
