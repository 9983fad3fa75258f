"""Read-only queries for the web UI and API: keyset-paginated lists on indexed columns (newest
first by id, the cursor is the last id seen) so a page costs the same with a million rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from beatflow.store.base import StoreBase
from beatflow.store.models import dag_runs, dead_letters, task_runs
from beatflow.store.records import DagRunRecord, DeadLetterRecord, TaskRunRecord
from beatflow.store.rows import dag_run_record, dead_letter_record, task_run_record


@dataclass(frozen=True, slots=True)
class RunBrief:
    """What a list of DAGs shows of each recent run."""

    run_id: str
    state: str
    queued_at: datetime


class BrowseMixin(StoreBase):
    def page_dag_runs(
        self,
        dag_id: str | None = None,
        *,
        state: str | None = None,
        trigger: str | None = None,
        run_id_contains: str | None = None,
        queued_since: datetime | None = None,
        queued_until: datetime | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> tuple[list[DagRunRecord], int | None]:
        """DAG runs newest first, at most ``limit``; ``before`` is the cursor a previous page
        returned. Returns ``(runs, next_cursor)`` (None on the last page). ``run_id_contains``
        matches literally (``%`` and ``_`` are not wildcards); ``queued_since`` is inclusive,
        ``queued_until`` exclusive."""
        query = sa.select(dag_runs).order_by(dag_runs.c.id.desc()).limit(max(1, limit) + 1)
        if run_id_contains:
            query = query.where(dag_runs.c.run_id.contains(run_id_contains, autoescape=True))
        if queued_since is not None:
            query = query.where(dag_runs.c.queued_at >= queued_since)
        if queued_until is not None:
            query = query.where(dag_runs.c.queued_at < queued_until)
        if dag_id is not None:
            query = query.where(dag_runs.c.dag_id == dag_id)
        if state is not None:
            query = query.where(dag_runs.c.state == state)
        if trigger is not None:
            query = query.where(dag_runs.c.trigger == trigger)
        if before is not None:
            query = query.where(dag_runs.c.id < before)
        with self._read("listing DAG runs") as conn:
            rows = conn.execute(query).mappings().all()
        more = len(rows) > limit
        rows = rows[:limit]
        cursor = int(rows[-1]["id"]) if more and rows else None
        return [dag_run_record(r) for r in rows], cursor

    def latest_dag_runs(
        self, dag_ids: Sequence[str], per_dag: int = 10
    ) -> dict[str, list[RunBrief]]:
        """The newest ``per_dag`` runs of each DAG, id, state and queue time only (one index
        range scan per DAG: one LATERAL query on PostgreSQL)."""
        out: dict[str, list[RunBrief]] = {d: [] for d in dag_ids}
        if not dag_ids:
            return out
        cols = (
            dag_runs.c.id,
            dag_runs.c.dag_id,
            dag_runs.c.run_id,
            dag_runs.c.state,
            dag_runs.c.queued_at,
        )
        with self._read("reading the latest runs of each DAG") as conn:
            rows = self._backend.latest_runs(conn, dag_ids, per_dag, cols)
        for _, dag_id, run_id, state, queued_at in sorted(rows, key=lambda r: -int(r[0])):
            out[dag_id].append(RunBrief(run_id, state, queued_at))
        return out

    def task_runs_of(self, dag_id: str, run_ids: Sequence[str]) -> list[TaskRunRecord]:
        """Every task run of the given runs of one DAG (the grid of runs x tasks)."""
        if not run_ids:
            return []
        query = sa.select(task_runs).where(
            task_runs.c.dag_id == dag_id, task_runs.c.run_id.in_(list(run_ids))
        )
        with self._read(f"reading task runs of {len(run_ids)} runs of DAG {dag_id}") as conn:
            return [task_run_record(r) for r in conn.execute(query).mappings()]

    def find_task_run(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> TaskRunRecord | None:
        """One task run by its place in a DAG run (whatever its dedupe key template)."""
        query = sa.select(task_runs).where(
            task_runs.c.dag_id == dag_id,
            task_runs.c.run_id == run_id,
            task_runs.c.task_id == task_id,
            task_runs.c.map_index == map_index,
        )
        with self._read(f"reading task run {dag_id}/{run_id}/{task_id}") as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else task_run_record(row)

    def page_dead_letters(
        self,
        dag_id: str | None = None,
        *,
        include_replayed: bool = False,
        before: int | None = None,
        limit: int = 50,
    ) -> tuple[list[DeadLetterRecord], int | None]:
        """Dead letters newest first with a keyset cursor, like ``page_dag_runs``."""
        query = sa.select(dead_letters).order_by(dead_letters.c.id.desc()).limit(max(1, limit) + 1)
        if dag_id is not None:
            query = query.where(dead_letters.c.dag_id == dag_id)
        if not include_replayed:
            query = query.where(
                dead_letters.c.replayed_at.is_(None), dead_letters.c.closed_at.is_(None)
            )
        if before is not None:
            query = query.where(dead_letters.c.id < before)
        with self._read("listing dead letters") as conn:
            rows = conn.execute(query).mappings().all()
        more = len(rows) > limit
        rows = rows[:limit]
        cursor = int(rows[-1]["id"]) if more and rows else None
        return [dead_letter_record(r) for r in rows], cursor
