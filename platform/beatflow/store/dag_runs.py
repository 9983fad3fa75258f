"""DAG runs once created (``run_creation``): queued -> running -> success|failed|cancelled, each
transition one conditional UPDATE with one winner (the dispatch of queued runs: ``dispatch``),
and the queries of the reconciler, the scheduler, the CLI and the exporter."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

import sqlalchemy as sa

from beatflow.errors import StoreError
from beatflow.store.base import StoreBase
from beatflow.store.engine import UTCDateTime, require_aware, utcnow
from beatflow.store.models import dag_runs, is_queued, is_running, task_runs
from beatflow.store.records import (
    DAG_QUEUED,
    DAG_RUN_ACTIVE_STATES,
    DAG_RUN_FINISHED_STATES,
    DAG_RUN_STATES,
    DAG_RUNNING,
    TASK_RUNNING,
    DagRunRecord,
)
from beatflow.store.rows import dag_run_record
from beatflow.store.sql import transition_statement, where_run


class DagRunsMixin(StoreBase):
    def mark_dag_run_running(self, dag_id: str, run_id: str) -> None:
        """queued -> running; started_at is set once (a second call changes nothing)."""
        now = sa.literal(utcnow(), UTCDateTime())
        with self._write(f"starting DAG run {dag_id}/{run_id}") as conn:
            conn.execute(
                sa.update(dag_runs)
                .where(where_run(dag_id, run_id), dag_runs.c.state == DAG_QUEUED)
                .values(state=DAG_RUNNING, started_at=sa.func.coalesce(dag_runs.c.started_at, now))
            )

    def finish_dag_run(
        self, dag_id: str, run_id: str, state: str, *, reason: str | None = None
    ) -> DagRunRecord:
        """Set a final state (and why, when given) and ended_at; a run that already finished is
        returned unchanged."""
        if state not in DAG_RUN_FINISHED_STATES:
            raise StoreError(
                f"cannot finish DAG run {dag_id}/{run_id} as {state!r}; "
                f"expected one of {', '.join(sorted(DAG_RUN_FINISHED_STATES))}"
            )
        now = utcnow()
        with self._write(f"finishing DAG run {dag_id}/{run_id}") as conn:
            conn.execute(
                sa.update(dag_runs)
                .where(where_run(dag_id, run_id), dag_runs.c.state.in_(DAG_RUN_ACTIVE_STATES))
                .values(
                    state=state,
                    ended_at=now,
                    started_at=sa.func.coalesce(
                        dag_runs.c.started_at, sa.literal(now, UTCDateTime())
                    ),
                    **({} if reason is None else {"failure_reason": reason}),
                )
            )
            row = conn.execute(sa.select(dag_runs).where(where_run(dag_id, run_id))).mappings()
            found = row.first()
        if found is None:
            raise StoreError(f"no DAG run {dag_id}/{run_id} to finish; create it first")
        return dag_run_record(found)

    def reopen_dag_run(self, dag_id: str, run_id: str) -> bool:
        """For replay: a finished DAG run goes back to running (ended_at cleared), so its
        closing step sets a new final state. False if it is not finished (or missing)."""
        with self._write(f"reopening DAG run {dag_id}/{run_id}") as conn:
            updated = conn.execute(
                sa.update(dag_runs)
                .where(where_run(dag_id, run_id), dag_runs.c.state.in_(DAG_RUN_FINISHED_STATES))
                .values(state="running", ended_at=None)
            )
            return updated.rowcount == 1

    def get_dag_run(self, dag_id: str, run_id: str) -> DagRunRecord | None:
        with self._read(f"reading DAG run {dag_id}/{run_id}") as conn:
            row = conn.execute(sa.select(dag_runs).where(where_run(dag_id, run_id))).mappings()
            found = row.first()
        return None if found is None else dag_run_record(found)

    def follow_dag_run(self, dag_id: str, run_id: str) -> DagRunRecord | None:
        """Mark the run followed (its end is then announced on Redis, migration 0013) and
        return it as it stands after that; None when there is no such run. A follower calls
        this once it listens, before it reads the run in any other way."""
        follow = (
            sa.update(dag_runs)
            .where(where_run(dag_id, run_id))
            .values(followed=True)
            .returning(*dag_runs.c)
        )
        with self._write(f"following DAG run {dag_id}/{run_id}") as conn:
            found = conn.execute(follow).mappings().first()
        return None if found is None else dag_run_record(found)

    def list_dag_runs(
        self, dag_id: str | None = None, *, state: str | None = None, limit: int = 50
    ) -> list[DagRunRecord]:
        """DAG runs, newest (most recently queued) first."""
        if state is not None and state not in DAG_RUN_STATES:
            known = ", ".join(sorted(DAG_RUN_STATES))
            raise StoreError(f"unknown DAG run state {state!r}; expected one of {known}")
        query = sa.select(dag_runs).order_by(dag_runs.c.queued_at.desc(), dag_runs.c.id.desc())
        if dag_id is not None:
            query = query.where(dag_runs.c.dag_id == dag_id)
        if state is not None:
            query = query.where(dag_runs.c.state == state)
        with self._read("listing DAG runs") as conn:
            rows = conn.execute(query.limit(max(0, limit))).mappings().all()
        return [dag_run_record(r) for r in rows]

    def count_active_dag_runs(self, dag_id: str) -> int:
        """Queued plus running runs of one DAG (for max_active_runs)."""
        query = sa.select(sa.func.count()).where(
            dag_runs.c.dag_id == dag_id, dag_runs.c.state.in_(DAG_RUN_ACTIVE_STATES)
        )
        with self._read(f"counting active runs of DAG {dag_id}") as conn:
            return int(conn.execute(query).scalar_one())

    def latest_logical_date(self, dag_id: str) -> datetime | None:
        """The latest logical date among the DAG's runs (catch-up resumes after it)."""
        column = sa.func.max(dag_runs.c.logical_date, type_=UTCDateTime())
        query = sa.select(column).where(dag_runs.c.dag_id == dag_id)
        with self._read(f"reading the latest logical date of DAG {dag_id}") as conn:
            value: datetime | None = conn.execute(query).scalar_one()
        return value

    def count_dag_runs_by_state(self) -> dict[tuple[str, str], int]:
        """(dag_id, state) -> number of runs, for the exporter."""
        query = sa.select(dag_runs.c.dag_id, dag_runs.c.state, sa.func.count()).group_by(
            dag_runs.c.dag_id, dag_runs.c.state
        )
        with self._read("counting DAG runs by state") as conn:
            return {(d, s): int(n) for d, s, n in conn.execute(query)}

    # ------------------------------------------------------------------ lifecycle transitions

    def transition_dag_run(
        self,
        dag_id: str,
        run_id: str,
        *,
        to: str,
        from_states: Collection[str],
        reason: str | None = None,
    ) -> bool:
        """Move a run from one of ``from_states`` to ``to`` in one conditional UPDATE; True if
        this call did it. To a final state: ended_at is set (and ``reason``, when given); back
        to queued or running (requeue after a failed send, clear): ended_at and reason are
        cleared and the reconciler's resume count starts again."""
        moved = self.transition_dag_run_returning(
            dag_id, run_id, to=to, from_states=from_states, reason=reason
        )
        return moved is not None

    def transition_dag_run_returning(
        self,
        dag_id: str,
        run_id: str,
        *,
        to: str,
        from_states: Collection[str],
        reason: str | None = None,
    ) -> DagRunRecord | None:
        """``transition_dag_run`` that returns the run as this call left it (one statement,
        UPDATE ... RETURNING), or None when it did not move it."""
        if to not in DAG_RUN_STATES:
            raise StoreError(f"unknown DAG run state {to!r} for DAG run {dag_id}/{run_id}")
        move = transition_statement(dag_id, run_id, to, from_states, utcnow(), reason)
        with self._write(f"moving DAG run {dag_id}/{run_id} to {to}") as conn:
            row = conn.execute(move).mappings().first()
        return None if row is None else dag_run_record(row)

    def record_resume(
        self, dag_id: str, run_id: str, *, seen_count: int, not_before: timedelta
    ) -> bool:
        """The reconciler resumes a stalled running run: count it and hold off the next resume
        for ``not_before``. One winner among concurrent reconcilers (the count must still be
        ``seen_count``); False if another one did it, or the run is no longer running."""
        with self._write(f"recording a resume of DAG run {dag_id}/{run_id}") as conn:
            updated = conn.execute(
                sa.update(dag_runs)
                .where(
                    where_run(dag_id, run_id),
                    dag_runs.c.state == DAG_RUNNING,
                    dag_runs.c.resume_count == seen_count,
                )
                .values(resume_count=seen_count + 1, resume_after=utcnow() + not_before)
            )
            return updated.rowcount == 1

    # ------------------------------------------------------------------ the reconciler's reads

    def stalled_dag_runs(self, grace: timedelta, *, limit: int) -> list[DagRunRecord]:
        """Running runs with no sign of life for ``grace``: started before it, not held off by
        a recent resume, and no task run that holds a live lease or started or ended within it.
        Oldest first, at most ``limit`` (the reconciler's bounded pass)."""
        now = utcnow()
        since = now - grace
        t = task_runs.c
        alive = (
            sa.select(sa.literal(1))
            .where(
                t.dag_id == dag_runs.c.dag_id,
                t.run_id == dag_runs.c.run_id,
                sa.or_(
                    sa.and_(t.state == TASK_RUNNING, t.lease_expires_at > now),
                    t.started_at > since,
                    t.ended_at > since,
                ),
            )
            .exists()
        )
        query = (
            sa.select(dag_runs)
            .where(
                is_running(dag_runs.c.state),
                dag_runs.c.started_at < since,
                sa.or_(dag_runs.c.resume_after.is_(None), dag_runs.c.resume_after < now),
                ~alive,
            )
            .order_by(dag_runs.c.started_at, dag_runs.c.id)
            .limit(max(0, limit))
        )
        with self._read("finding stalled DAG runs") as conn:
            return [dag_run_record(r) for r in conn.execute(query).mappings()]

    def running_dag_runs_started_before(
        self, dag_id: str, before: datetime, *, limit: int
    ) -> list[DagRunRecord]:
        """Running runs of ``dag_id`` started before ``before`` (dagrun_timeout), oldest first."""
        query = (
            sa.select(dag_runs)
            .where(
                dag_runs.c.dag_id == dag_id,
                is_running(dag_runs.c.state),
                dag_runs.c.started_at < require_aware(before, "before"),
            )
            .order_by(dag_runs.c.started_at, dag_runs.c.id)
            .limit(max(0, limit))
        )
        with self._read(f"finding timed-out runs of DAG {dag_id}") as conn:
            return [dag_run_record(r) for r in conn.execute(query).mappings()]

    def dag_ids_with_queued_runs(self, *, limit: int) -> list[str]:
        """DAGs that have queued runs (the reconciler dispatches them when slots are free)."""
        query = (
            sa.select(dag_runs.c.dag_id)
            .where(is_queued(dag_runs.c.state))
            .group_by(dag_runs.c.dag_id)
            .order_by(sa.func.min(dag_runs.c.queued_at))
            .limit(max(0, limit))
        )
        with self._read("finding DAGs with queued runs") as conn:
            return list(conn.execute(query).scalars())
