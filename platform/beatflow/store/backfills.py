"""Backfills (migration 0024): a backfill's row holds its plan (the runs it creates or re-runs,
oldest first) and how many of them it has ``released``. Releasing is a compare-and-set on
``released``, so two callers at once (the backfill's own call, reconciler passes) never release
the same plan entries twice; cancelling is a conditional update from ``running``, audited in
its transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.store.audit import audit_insert
from beatflow.store.base import StoreBase
from beatflow.store.engine import utcnow
from beatflow.store.models import backfills, dag_runs
from beatflow.store.records import AuditNote, DagRunRecord
from beatflow.store.rows import dag_run_record
from beatflow.store.sql import check_conf

BACKFILL_RUNNING = "running"
BACKFILL_DONE = "done"
BACKFILL_CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class BackfillRecord:
    """One backfill. ``plan``: one ``{"run_id", "logical_date", "action"}`` per run, oldest
    first (``action``: ``create`` a run, or ``rerun`` an ended one); the first ``released``
    of them have been created or re-run."""

    id: int
    dag_id: str
    state: str
    start: datetime
    end: datetime
    reprocess: str
    max_active_runs: int
    conf: dict[str, Any]
    plan: list[dict[str, Any]]
    released: int
    actor: str
    reason: str
    created_at: datetime
    ended_at: datetime | None

    @property
    def run_ids(self) -> list[str]:
        return [entry["run_id"] for entry in self.plan]


def _record(row: sa.RowMapping) -> BackfillRecord:
    return BackfillRecord(
        **{**row, "conf": dict(row["conf"] or {}), "plan": list(row["plan"] or [])}
    )


class BackfillsMixin(StoreBase):
    def create_backfill(
        self,
        dag_id: str,
        *,
        start: datetime,
        end: datetime,
        reprocess: str,
        max_active_runs: int,
        conf: dict[str, Any],
        plan: list[dict[str, Any]],
        audit: AuditNote,
    ) -> BackfillRecord:
        """Record a backfill (nothing released yet) with its audit record, in one transaction."""
        values = {
            "dag_id": dag_id,
            "state": BACKFILL_RUNNING if plan else BACKFILL_DONE,
            "start": start,
            "end": end,
            "reprocess": reprocess,
            "max_active_runs": max_active_runs,
            "conf": check_conf(conf, f"conf of a backfill of {dag_id}"),
            "plan": plan,
            "released": 0,
            "actor": audit.actor[:250],
            "reason": str(audit.detail.get("reason", "")),
            "created_at": utcnow(),
            "ended_at": None if plan else utcnow(),
        }
        with self._write(f"recording a backfill of {dag_id}", transaction=True) as conn:
            row = (
                conn.execute(sa.insert(backfills).values(**values).returning(*backfills.c))
                .mappings()
                .one()
            )
            conn.execute(audit_insert(audit, dag_id, None, backfill_id=row["id"], runs=len(plan)))
        return _record(row)

    def get_backfill(self, backfill_id: int) -> BackfillRecord | None:
        query = sa.select(backfills).where(backfills.c.id == backfill_id)
        with self._read(f"reading backfill {backfill_id}") as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _record(row)

    def list_backfills(self, dag_id: str, *, limit: int = 50) -> list[BackfillRecord]:
        """A DAG's backfills, newest first."""
        query = (
            sa.select(backfills)
            .where(backfills.c.dag_id == dag_id)
            .order_by(backfills.c.id.desc())
            .limit(limit)
        )
        with self._read(f"reading backfills of {dag_id}") as conn:
            return [_record(r) for r in conn.execute(query).mappings()]

    def running_backfills(self, *, limit: int) -> list[BackfillRecord]:
        """Backfills still releasing or waiting for their runs, oldest first (the reconciler)."""
        query = (
            sa.select(backfills)
            .where(backfills.c.state == BACKFILL_RUNNING)
            .order_by(backfills.c.id)
            .limit(limit)
        )
        with self._read("reading running backfills") as conn:
            return [_record(r) for r in conn.execute(query).mappings()]

    def release_backfill(self, backfill_id: int, *, seen: int, to: int) -> bool:
        """Move ``released`` from ``seen`` to ``to`` if no one else moved it and the backfill
        still runs: True for the one caller that then creates or re-runs those entries."""
        update = (
            sa.update(backfills)
            .where(
                backfills.c.id == backfill_id,
                backfills.c.released == seen,
                backfills.c.state == BACKFILL_RUNNING,
            )
            .values(released=to)
        )
        with self._write(f"releasing runs of backfill {backfill_id}") as conn:
            return conn.execute(update).rowcount == 1

    def end_backfill(
        self, backfill_id: int, *, to: str, audit: AuditNote | None = None
    ) -> BackfillRecord | None:
        """``running`` -> ``to`` (done or cancelled), with ``audit`` in the same transaction;
        the backfill as it is then, or None when it was not running."""
        update = (
            sa.update(backfills)
            .where(backfills.c.id == backfill_id, backfills.c.state == BACKFILL_RUNNING)
            .values(state=to, ended_at=utcnow())
            .returning(*backfills.c)
        )
        with self._write(f"ending backfill {backfill_id}", transaction=True) as conn:
            row = conn.execute(update).mappings().first()
            if row is not None and audit is not None:
                conn.execute(audit_insert(audit, row["dag_id"], None, backfill_id=backfill_id))
        return None if row is None else _record(row)

    def dag_run_states(self, dag_id: str, run_ids: Sequence[str]) -> dict[str, str]:
        """The state of each of ``dag_id``'s runs named in ``run_ids`` that exists."""
        return {run_id: run.state for run_id, run in self.get_dag_runs(dag_id, run_ids).items()}

    def get_dag_runs(self, dag_id: str, run_ids: Sequence[str]) -> dict[str, DagRunRecord]:
        """Each of ``dag_id``'s runs named in ``run_ids`` that exists, by run id (one read per
        thousand ids)."""
        runs: dict[str, DagRunRecord] = {}
        ids = list(run_ids)
        if not ids:
            return runs
        with self._read(f"reading {len(ids)} runs of {dag_id}") as conn:
            for i in range(0, len(ids), 1000):
                query = sa.select(dag_runs).where(
                    dag_runs.c.dag_id == dag_id, dag_runs.c.run_id.in_(ids[i : i + 1000])
                )
                for row in conn.execute(query).mappings():
                    runs[row["run_id"]] = dag_run_record(row)
        return runs
