"""Per-DAG pause switches (read by beat on every tick) and retention: pruning old finished runs
in batches of short transactions, so writers are never locked out for long."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import sqlalchemy as sa

from beatflow.errors import StoreError
from beatflow.store.audit import audit_insert
from beatflow.store.base import StoreBase
from beatflow.store.engine import utcnow
from beatflow.store.models import (
    dag_runs,
    dag_states,
    dead_letters,
    map_fan_ins,
    map_items,
    notifications,
    pool_slots,
    sensor_pokes,
    task_logs,
    task_runs,
)
from beatflow.store.records import DAG_RUN_FINISHED_STATES, AuditNote


class MaintenanceMixin(StoreBase):
    def set_paused(self, dag_id: str, paused: bool, *, audit: AuditNote | None = None) -> None:
        """Pause or unpause a DAG; the switch survives restarts. ``audit``: the operator's
        record of it, written in the same transaction (both commit, or neither)."""
        insert = self._insert(dag_states).values(
            dag_id=dag_id, paused=bool(paused), updated_at=utcnow()
        )
        upsert = insert.on_conflict_do_update(
            index_elements=["dag_id"],
            set_={"paused": insert.excluded.paused, "updated_at": insert.excluded.updated_at},
        )
        action = f"{'pausing' if paused else 'unpausing'} DAG {dag_id}"
        with self._write(action, transaction=audit is not None) as conn:
            conn.execute(upsert)
            if audit is not None:
                conn.execute(audit_insert(audit, dag_id, None))

    def is_paused(self, dag_id: str) -> bool:
        """One primary-key lookup."""
        query = sa.select(dag_states.c.paused).where(dag_states.c.dag_id == dag_id)
        with self._read(f"reading whether DAG {dag_id} is paused") as conn:
            return bool(conn.execute(query).scalar())

    def paused_dag_ids(self) -> set[str]:
        """Every paused DAG, in one query (beat reads it once per tick)."""
        query = sa.select(dag_states.c.dag_id).where(dag_states.c.paused.is_(True))
        with self._read("reading paused DAGs") as conn:
            return set(conn.execute(query).scalars())

    def prune(
        self,
        older_than: timedelta,
        *,
        batch_size: int = 500,
        on_batch: Callable[[int], None] | None = None,
        audit: AuditNote | None = None,
    ) -> int:
        """Delete finished DAG runs that ended before now - ``older_than``, with their task runs,
        dead letters, logs, map items, notifications, sensor pokes and pool holds,
        ``batch_size`` runs per transaction; returns the DAG runs deleted. ``on_batch(n)`` is
        called after each committed batch (progress reporting). ``audit``: the operator's
        record, with ``deleted`` (the total) in its detail, written in the transaction of the
        last batch (an audit that fails leaves that batch undone; the batches before it stay
        deleted, as an interrupted prune leaves them)."""
        if older_than < timedelta(0):
            raise StoreError(f"prune: older_than={older_than} must not be negative")
        if batch_size < 1:
            raise StoreError(f"prune: batch_size={batch_size} must be at least 1")
        cutoff = utcnow() - older_than
        pick = (
            sa.select(dag_runs.c.id, dag_runs.c.dag_id, dag_runs.c.run_id)
            .where(
                dag_runs.c.state.in_(DAG_RUN_FINISHED_STATES),
                dag_runs.c.ended_at < cutoff,
            )
            .order_by(dag_runs.c.ended_at)
            .limit(batch_size)
        )
        deleted = 0
        while True:
            with self._write("pruning old DAG runs", transaction=True) as conn:
                batch = conn.execute(pick).all()
                last = len(batch) < batch_size
                if last and audit is not None:
                    conn.execute(audit_insert(audit, None, None, deleted=deleted + len(batch)))
                if not batch:
                    return deleted
                pairs = [(dag_id, run_id) for _, dag_id, run_id in batch]
                for table in (
                    task_runs,
                    dead_letters,
                    task_logs,
                    map_items,
                    map_fan_ins,
                    notifications,
                    sensor_pokes,
                    pool_slots,  # a pooled task run's hold (or wait) of its pool's slots
                ):
                    conn.execute(
                        sa.delete(table).where(sa.tuple_(table.c.dag_id, table.c.run_id).in_(pairs))
                    )
                conn.execute(sa.delete(dag_runs).where(dag_runs.c.id.in_([b[0] for b in batch])))
            deleted += len(batch)
            if on_batch is not None:
                on_batch(len(batch))
            if last:
                return deleted
