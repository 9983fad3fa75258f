"""The audit table: who did what (to a DAG, a run), when and why, written by every verb that
changes runs (CLI, API, UI), and read newest first."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.store.base import StoreBase
from beatflow.store.engine import require_aware, utcnow
from beatflow.store.models import audit_events
from beatflow.store.records import AuditNote, AuditRecord
from beatflow.store.sql import check_conf


def audit_values(note: AuditNote, dag_id: str | None, run_id: str | None) -> dict[str, Any]:
    """The checked column values of an audit record (the one place they are made: alone, or
    in the transaction of the change they record)."""
    return {
        "at": utcnow(),
        "actor": note.actor[:250],
        "action": note.action[:50],
        "dag_id": dag_id,
        "run_id": run_id,
        "detail": check_conf(note.detail, f"audit detail of {note.action}"),
    }


def audit_insert(note: AuditNote, dag_id: str | None, run_id: str | None, **more: Any) -> sa.Insert:
    """The insert of ``note``'s record, for a verb's store call to run in the transaction of
    its change (so both commit, or neither); ``more`` joins the detail (what the change did,
    known only inside it, e.g. how many rows it deleted)."""
    detail = {**note.detail, **more}
    return sa.insert(audit_events).values(
        **audit_values(AuditNote(note.actor, note.action, detail), dag_id, run_id)
    )


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


class AuditMixin(StoreBase):
    def record_audit(
        self,
        actor: str,
        action: str,
        dag_id: str | None = None,
        run_id: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> AuditRecord:
        """Record that ``actor`` did ``action`` (to a DAG, a run), with a JSON ``detail``."""
        values = audit_values(AuditNote(actor, action, detail or {}), dag_id, run_id)
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
