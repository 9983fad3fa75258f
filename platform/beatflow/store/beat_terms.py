"""The beat's side of the results DB: scheduled DAG runs created behind the leader-epoch fence
(a deposed leader that wakes up cannot add a run once a newer epoch was recorded), the fence
itself, and the catch-up fallback (the latest scheduled tick)."""

from __future__ import annotations

from collections.abc import Sequence
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
    INSERT_CHUNK,
    TRIGGER_BACKFILL,
    TRIGGER_CATCHUP,
    TRIGGER_SCHEDULED,
    DagRunRecord,
    ScheduledRunDraft,
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
        draft = ScheduledRunDraft(dag_id, run_id, logical_date, trigger, conf, failure_reason)
        values = _scheduled_values(draft, leader_epoch, utcnow())
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

    def create_fenced_dag_runs(
        self, drafts: Sequence[ScheduledRunDraft], *, leader_epoch: int
    ) -> list[tuple[DagRunRecord, bool]]:
        """``create_fenced_dag_run`` for many runs in one transaction: the fence checked once,
        one multi-row insert. ``(run, created)`` per draft, in order (a draft named twice is
        one run, created at most once). Raises StaleLeaderError, and creates nothing, when a
        newer leader epoch is recorded."""
        if not drafts:
            return []
        now = utcnow()
        values = [_scheduled_values(d, leader_epoch, now) for d in drafts]
        action = f"creating {len(drafts)} scheduled DAG run(s)"
        with self._write(action, transaction=True) as conn:
            self._fence(conn, leader_epoch, refuse=True)
            return self._insert_drafts(conn, drafts, values)

    def create_dag_runs(
        self, drafts: Sequence[ScheduledRunDraft]
    ) -> list[tuple[DagRunRecord, bool]]:
        """Many DAG runs without a leader's fence (a backfill): one transaction and one
        multi-row insert per INSERT_CHUNK drafts. ``(run, created)`` per draft, in order; an
        existing run is kept as it is. Every draft's values are checked before the first chunk
        is written: a bad one (StoreError names it) creates nothing."""
        now = utcnow()
        values = [_scheduled_values(d, None, now) for d in drafts]  # all checked, then written
        out: list[tuple[DagRunRecord, bool]] = []
        for i in range(0, len(drafts), INSERT_CHUNK):
            chunk = drafts[i : i + INSERT_CHUNK]
            with self._write(f"creating {len(chunk)} DAG run(s)", transaction=True) as conn:
                out += self._insert_drafts(conn, chunk, values[i : i + INSERT_CHUNK])
        return out

    def _insert_drafts(
        self,
        conn: sa.Connection,
        drafts: Sequence[ScheduledRunDraft],
        values: Sequence[dict[str, Any]],
    ) -> list[tuple[DagRunRecord, bool]]:
        """Insert ``drafts`` with their column ``values`` (``_scheduled_values``, one per draft)."""
        by_key = {(d.dag_id, d.run_id): v for d, v in zip(drafts, values, strict=True)}
        rows = list(by_key.values())  # a draft named twice is inserted once
        # many parameter sets to one statement: SQLAlchemy compiles it once (its cache) and
        # batches the sets into multi-row INSERTs itself ("insertmanyvalues"), where
        # .values(rows) compiled a new statement (a bind parameter per value) on every call
        insert = (
            self._insert(dag_runs)
            .on_conflict_do_nothing(index_elements=["dag_id", "run_id"])
            .returning(*dag_runs.c)
        )
        inserted = conn.execute(insert, rows).mappings()
        made = {(r.dag_id, r.run_id): r for r in map(dag_run_record, inserted)}
        others = sorted(key for key in by_key if key not in made)
        found: dict[tuple[str, str], DagRunRecord] = {}
        if others:
            query = sa.select(dag_runs).where(self._of_runs(dag_runs, others))
            rows_found = conn.execute(query).mappings()
            found = {(r.dag_id, r.run_id): r for r in map(dag_run_record, rows_found)}
        out: list[tuple[DagRunRecord, bool]] = []
        seen: set[tuple[str, str]] = set()
        for d in drafts:
            key = (d.dag_id, d.run_id)
            out.append((made[key], key not in seen) if key in made else (found[key], False))
            seen.add(key)
        return out

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


def _scheduled_values(
    draft: ScheduledRunDraft, leader_epoch: int | None, now: datetime
) -> dict[str, Any]:
    d = draft
    failed = d.failure_reason is not None
    return {
        "dag_id": d.dag_id,
        "run_id": d.run_id,
        "logical_date": require_aware(d.logical_date, "logical_date"),
        "trigger": d.trigger,
        "conf": check_conf(d.conf, f"conf of DAG run {d.dag_id}/{d.run_id}"),
        "state": DAG_FAILED if failed else DAG_QUEUED,
        "queued_at": now,
        "started_at": now if failed else None,
        "ended_at": now if failed else None,
        "leader_epoch": leader_epoch,
        "failure_reason": d.failure_reason,
    }
