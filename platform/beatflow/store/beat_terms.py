"""The beat's side of the results DB: scheduled DAG runs created behind the leader-epoch fence
(a deposed leader that wakes up cannot add a run once a newer epoch was recorded), the fence
itself, and the catch-up fallback (the latest scheduled tick)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.errors import StaleLeaderError
from beatflow.store.base import StoreBase, dag_run_record
from beatflow.store.dag_runs import _where, check_conf
from beatflow.store.engine import UTCDateTime, require_aware, utcnow
from beatflow.store.models import beat_terms, dag_runs
from beatflow.store.records import (
    DAG_FAILED,
    DAG_QUEUED,
    TRIGGER_BACKFILL,
    TRIGGER_CATCHUP,
    TRIGGER_SCHEDULED,
    DagRunRecord,
)

TERM = "beat"
SCHEDULED_TRIGGERS = (TRIGGER_SCHEDULED, TRIGGER_CATCHUP, TRIGGER_BACKFILL)


class BeatTermsMixin(StoreBase):
    def epoch_floor(self) -> int:
        """The newest beat leader epoch recorded (0 before any)."""
        query = sa.select(beat_terms.c.epoch).where(beat_terms.c.name == TERM)
        with self._read("reading the beat leader epoch") as conn:
            value = conn.execute(query).scalar_one_or_none()
        return int(value or 0)

    def raise_epoch_floor(self, epoch: int) -> int:
        """Record ``epoch`` as the newest leader epoch unless a newer one is recorded; return the
        newest. A new leader calls this first, so the old leader's later writes are refused."""
        with self._write(f"recording beat leader epoch {epoch}", transaction=True) as conn:
            return self._fence(conn, epoch, refuse=False)

    def create_fenced_dag_run(
        self,
        dag_id: str,
        run_id: str,
        *,
        logical_date: datetime,
        trigger: str,
        conf: dict[str, Any] | None,
        leader_epoch: int,
        failure_reason: str | None = None,
    ) -> tuple[DagRunRecord, bool]:
        """Like ``create_dag_run``, for the beat: in one transaction, refuse (StaleLeaderError)
        when a newer leader epoch is recorded, else insert the run (queued; or failed, with
        ``failure_reason``, when it cannot run). ``(run, created)``."""
        now = utcnow()
        values = {
            "dag_id": dag_id,
            "run_id": run_id,
            "logical_date": require_aware(logical_date, "logical_date"),
            "trigger": trigger,
            "conf": check_conf(conf, f"conf of DAG run {dag_id}/{run_id}"),
            "state": DAG_QUEUED if failure_reason is None else DAG_FAILED,
            "queued_at": now,
            "started_at": None if failure_reason is None else now,
            "ended_at": None if failure_reason is None else now,
            "leader_epoch": leader_epoch,
            "failure_reason": failure_reason,
        }
        insert = (
            self._insert(dag_runs)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["dag_id", "run_id"])
            .returning(*dag_runs.c)
        )
        action = f"creating scheduled DAG run {dag_id}/{run_id}"
        with self._write(action, transaction=True) as conn:
            self._fence(conn, leader_epoch, refuse=True)
            row = conn.execute(insert).mappings().first()
            if row is not None:
                return dag_run_record(row), True
            existing = conn.execute(sa.select(dag_runs).where(_where(dag_id, run_id)))
            return dag_run_record(existing.mappings().one()), False

    def latest_scheduled_logical_date(self, dag_id: str) -> datetime | None:
        """The latest tick among the DAG's scheduled, caught-up and backfilled runs: where the
        beat resumes when Redis lost its watermark (a manual run's date says nothing of ticks)."""
        column = sa.func.max(dag_runs.c.logical_date, type_=UTCDateTime())
        query = sa.select(column).where(
            dag_runs.c.dag_id == dag_id, dag_runs.c.trigger.in_(SCHEDULED_TRIGGERS)
        )
        with self._read(f"reading the latest scheduled tick of DAG {dag_id}") as conn:
            value: datetime | None = conn.execute(query).scalar_one()
        return value

    def _fence(self, conn: sa.Connection, epoch: int, *, refuse: bool) -> int:
        """Lock the term row until commit, raise it to ``epoch``; return the newest epoch. The
        lock orders a new leader's first write after any run an old leader is committing."""
        epoch = int(epoch)
        conn.execute(
            self._insert(beat_terms)
            .values(name=TERM, epoch=0, updated_at=utcnow())
            .on_conflict_do_nothing(index_elements=["name"])
        )
        select = sa.select(beat_terms.c.epoch).where(beat_terms.c.name == TERM)
        newest = int(conn.execute(select.with_for_update()).scalar_one())
        if refuse and newest > epoch:
            raise StaleLeaderError(epoch, newest)
        if epoch > newest:
            conn.execute(
                sa.update(beat_terms)
                .where(beat_terms.c.name == TERM)
                .values(epoch=epoch, updated_at=utcnow())
            )
            newest = epoch
        return newest
