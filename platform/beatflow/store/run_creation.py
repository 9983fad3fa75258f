"""Creating DAG runs, the one way: a manual trigger (with the dispatch of its DAG), a beat's fires
(behind the leader-epoch fence), a backfill (in chunks) all build their rows with
``sql.run_values`` and go through ``RunCreationMixin._create_runs``. A run is created once per
(dag_id, run_id) whatever the number of triggers: the insert is ON CONFLICT DO NOTHING, and a
run that exists is returned as it is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from beatflow.store.audit import audit_insert, audit_values
from beatflow.store.base import StoreBase
from beatflow.store.beat_terms import raise_fence
from beatflow.store.engine import utcnow
from beatflow.store.records import (
    INSERT_CHUNK,
    TRIGGER_MANUAL,
    AuditNote,
    DagRunRecord,
    ScheduledRunDraft,
    TriggeredRun,
)
from beatflow.store.sql import insert_runs, run_values

Made = list[tuple[DagRunRecord, bool]]


class RunCreationMixin(StoreBase):
    def create_dag_run(
        self,
        dag_id: str,
        run_id: str,
        *,
        logical_date: datetime | None = None,
        trigger: str = TRIGGER_MANUAL,
        conf: dict[str, Any] | None = None,
        leader_epoch: int | None = None,
    ) -> tuple[DagRunRecord, bool]:
        """Insert a queued DAG run, or return the existing one: ``(run, created)``. Two beats
        firing the same tick, or a trigger sent twice, make one run."""
        values = run_values(
            dag_id,
            run_id,
            logical_date=logical_date,
            trigger=trigger,
            conf=conf,
            leader_epoch=leader_epoch,
            now=utcnow(),
        )
        (made,) = self._create_runs([values], transaction=False).made
        return made

    def create_and_start_dag_run(
        self,
        dag_id: str,
        run_id: str,
        max_active_runs: int,
        *,
        logical_date: datetime | None = None,
        trigger: str = TRIGGER_MANUAL,
        conf: dict[str, Any] | None = None,
        leader_epoch: int | None = None,
        followed: bool = False,
        audit: AuditNote | None = None,
    ) -> TriggeredRun:
        """``create_dag_run`` then, when the run is queued (new, or its first dispatch failed),
        ``start_queued_dag_runs(dag_id, max_active_runs)``, in one transaction (one round trip
        on PostgreSQL). A run that exists and is no longer queued is returned as it is, with
        nothing started. On PostgreSQL, a new run that finds a free slot and nothing queued is
        inserted as running without the dispatch lock (migration 0015), checked against the
        limit by the count the insert itself took. ``followed``: a new run is created marked
        followed (its end is announced: the caller listens on its channel already); a run that
        exists keeps its mark. ``audit``: the operator's record of this trigger, written in
        the same transaction (an audit that fails leaves no run, and the reverse)."""
        values = run_values(
            dag_id,
            run_id,
            logical_date=logical_date,
            trigger=trigger,
            conf=conf,
            leader_epoch=leader_epoch,
            now=utcnow(),
            followed=followed,
        )
        noted = None if audit is None else audit_values(audit, dag_id, run_id)
        created = self._create_runs([values], start_under=max_active_runs, audit=noted)
        ((run, is_new),) = created.made
        return TriggeredRun(run, is_new, created.started)

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
        (made,) = self.create_fenced_dag_runs([draft], leader_epoch=leader_epoch)
        return made

    def create_fenced_dag_runs(
        self, drafts: Sequence[ScheduledRunDraft], *, leader_epoch: int
    ) -> Made:
        """``create_fenced_dag_run`` for many runs in one transaction: the fence checked once,
        one multi-row insert. ``(run, created)`` per draft, in order (a draft named twice is
        one run, created at most once). Raises StaleLeaderError, and creates nothing, when a
        newer leader epoch is recorded."""
        if not drafts:
            return []
        values = _drafted(drafts, leader_epoch)
        return self._create_runs(values, fence=leader_epoch).made

    def create_dag_runs(
        self, drafts: Sequence[ScheduledRunDraft], *, audit: AuditNote | None = None
    ) -> Made:
        """Many DAG runs without a leader's fence (a backfill): one transaction and one
        multi-row insert per INSERT_CHUNK drafts. ``(run, created)`` per draft, in order; an
        existing run is kept as it is. Every draft's values are checked before the first chunk
        is written: a bad one (StoreError names it) creates nothing. ``audit``: the operator's
        record (of the first draft's DAG), with ``runs`` and ``created`` in its detail, written
        in the transaction of the last chunk (an audit that fails leaves that chunk unwritten;
        the chunks before it stay, as an interrupted backfill leaves them)."""
        return self._create_runs(_drafted(drafts, None), closing_audit=audit).made

    def _create_runs(
        self,
        values: Sequence[dict[str, Any]],
        *,
        fence: int | None = None,
        start_under: int | None = None,
        audit: dict[str, Any] | None = None,
        transaction: bool = True,
        closing_audit: AuditNote | None = None,
    ) -> Created:
        """Every DAG run is created here. ``values``: one ``run_values`` per run.
        ``start_under``: one run, whose DAG is then dispatched under this max_active_runs in
        the same transaction (the backend's ``create_and_start``: one round trip on
        PostgreSQL), with the ``audit`` record of who asked. ``fence``: the beat leader's
        epoch, checked (StaleLeaderError) and the runs inserted in one transaction. Else one
        transaction per INSERT_CHUNK runs (``transaction`` False: a single run, written in
        autocommit on PostgreSQL), the ``closing_audit`` record in the last one."""
        if start_under is not None:
            (one,) = values
            triggered = self._backend.create_and_start(self._db, one, start_under, audit)
            return Created([(triggered.run, triggered.created)], triggered.started)
        scheduled = "scheduled " if fence is not None else ""
        if fence is not None:
            with self._write(_action(values, scheduled), transaction=True) as conn:
                raise_fence(conn, self._backend, fence, refuse=True)
                return Created(insert_runs(conn, self._backend, values))
        made: Made = []
        last = len(values) - 1
        for i in range(0, len(values), INSERT_CHUNK):
            chunk = values[i : i + INSERT_CHUNK]
            with self._write(_action(chunk, scheduled), transaction=transaction) as conn:
                made += insert_runs(conn, self._backend, chunk)
                if closing_audit is not None and i + INSERT_CHUNK > last:
                    done = {"runs": len(made), "created": sum(new for _, new in made)}
                    conn.execute(audit_insert(closing_audit, chunk[0]["dag_id"], None, **done))
        return Created(made)


@dataclass(frozen=True, slots=True)
class Created:
    """What ``_create_runs`` did: ``(run, created)`` per row asked for, and the runs the
    dispatch ``started`` (oldest first), which the caller sends."""

    made: Made
    started: tuple[DagRunRecord, ...] = ()


def _drafted(drafts: Sequence[ScheduledRunDraft], leader_epoch: int | None) -> list[dict[str, Any]]:
    """The checked values of every draft (all checked before any is written)."""
    now = utcnow()
    return [
        run_values(
            d.dag_id,
            d.run_id,
            logical_date=d.logical_date,
            trigger=d.trigger,
            conf=d.conf,
            leader_epoch=leader_epoch,
            now=now,
            failure_reason=d.failure_reason,
        )
        for d in drafts
    ]


def _action(values: Sequence[dict[str, Any]], scheduled: str) -> str:
    if len(values) == 1:
        return f"creating {scheduled}DAG run {values[0]['dag_id']}/{values[0]['run_id']}"
    return f"creating {len(values)} {scheduled}DAG run(s)"
