"""Dispatch fused with what precedes it: a trigger's create-and-start in one transaction, and
the queued runs of many DAGs (a beat's batch of fires) started in one. The same guarantees as
``start_queued_dag_runs``: the per-DAG lock, one winner, never over max_active_runs."""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.store.base import StoreBase, dag_run_record
from beatflow.store.dag_runs import _start_oldest, _where, new_run_values, oldest_first
from beatflow.store.engine import UTCDateTime, dumps_json, utcnow
from beatflow.store.models import dag_runs
from beatflow.store.records import DAG_QUEUED, TRIGGER_MANUAL, DagRunRecord, TriggeredRun

# one round trip each on PostgreSQL (migrations 0008, 0015, 0018)
_CREATE_AND_START = sa.text(
    "SELECT f.is_new, f.is_started, (f.run).* FROM beatflow_create_and_start("
    "CAST(:dag_id AS text), CAST(:run_id AS text), :logical_date, CAST(:trigger AS text), "
    "CAST(:conf AS json), :queued_at, CAST(:leader_epoch AS bigint), CAST(:max AS integer), "
    "CAST(:followed AS boolean)) AS f"
).bindparams(
    sa.bindparam("logical_date", type_=UTCDateTime()),
    sa.bindparam("queued_at", type_=UTCDateTime()),
)
_CREATE_AND_START_PARAMS = (
    "dag_id",
    "run_id",
    "logical_date",
    "trigger",
    "queued_at",
    "leader_epoch",
    "followed",
)
_START_MANY = sa.text(
    "SELECT * FROM beatflow_start_queued_many(CAST(:dag_ids AS text[]), CAST(:maxes AS integer[]))"
)


@functools.cache
def _create_and_start() -> sa.TextClause:
    """The call with its typed result columns, built once (it runs on every trigger)."""
    columns = (sa.column("is_new", sa.Boolean()), sa.column("is_started", sa.Boolean()))
    return _CREATE_AND_START.columns(*columns, *dag_runs.c)  # type: ignore[return-value]


class DispatchMixin(StoreBase):
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
    ) -> TriggeredRun:
        """``create_dag_run`` then, when the run is queued (new, or its first dispatch failed),
        ``start_queued_dag_runs(dag_id, max_active_runs)``, in one transaction (one round trip
        on PostgreSQL). A run that exists and is no longer queued is returned as it is, with
        nothing started. On PostgreSQL, a new run that finds a free slot and nothing queued is
        inserted as running without the dispatch lock (migration 0015), checked against the
        limit by the count the insert itself took. ``followed``: a new run is created marked
        followed (its end is announced: the caller listens on its channel already); a run that
        exists keeps its mark."""
        values = new_run_values(dag_id, run_id, logical_date, trigger, conf, leader_epoch)
        values["followed"] = followed
        action = f"creating and dispatching DAG run {dag_id}/{run_id}"
        if self.dialect == "postgresql":
            params = {key: values[key] for key in _CREATE_AND_START_PARAMS}
            params.update(conf=dumps_json(values["conf"]), max=max_active_runs)
            rows = self._driver_rows(action, _create_and_start, params)
            own = next(r for r in rows if r["run_id"] == run_id)
            run = dag_run_record(own)
            started = [dag_run_record(r) for r in rows if r["is_started"]]
            return TriggeredRun(run, bool(own["is_new"]), tuple(oldest_first(started, utcnow())))
        insert = (
            self._insert(dag_runs)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["dag_id", "run_id"])
            .returning(*dag_runs.c)
        )
        with self._write(action) as conn:  # BEGIN IMMEDIATE: SQLite's write lock from here
            row = conn.execute(insert).mappings().first()
            created = row is not None
            if row is None:
                row = (
                    conn.execute(sa.select(dag_runs).where(_where(dag_id, run_id))).mappings().one()
                )
            run = dag_run_record(row)
            if run.state != DAG_QUEUED:
                return TriggeredRun(run, created, ())
            now = utcnow()
            moved = conn.execute(_start_oldest(dag_id, max_active_runs, now)).mappings()
            started = [dag_run_record(r) for r in moved]
        run = next((r for r in started if r.run_id == run_id), run)
        return TriggeredRun(run, created, tuple(oldest_first(started, now)))

    def start_queued_dag_runs_of(
        self, max_active_runs: Mapping[str, int]
    ) -> dict[str, list[DagRunRecord]]:
        """``start_queued_dag_runs`` for each DAG of ``max_active_runs`` (dag_id -> limit) in
        one transaction (one round trip on PostgreSQL); dag_id -> the runs started, oldest
        first, for every DAG asked about. The per-DAG locks are taken in one global order, so
        concurrent batches never deadlock."""
        started: dict[str, list[DagRunRecord]] = {dag_id: [] for dag_id in max_active_runs}
        if not started:
            return started
        action = f"starting queued runs of {len(started)} DAG(s)"
        if self.dialect == "postgresql":
            call = _START_MANY.columns(*dag_runs.c)
            params = {"dag_ids": list(started), "maxes": list(max_active_runs.values())}
            with self._write(action) as conn:
                for row in conn.execute(call, params).mappings():
                    started[row["dag_id"]].append(dag_run_record(row))
            now = utcnow()
        else:
            with self._write(action) as conn:
                now = utcnow()
                for dag_id, limit in max_active_runs.items():
                    rows = conn.execute(_start_oldest(dag_id, limit, now)).mappings()
                    started[dag_id] = [dag_run_record(r) for r in rows]
        return {dag_id: oldest_first(runs, now) for dag_id, runs in started.items()}

    def existing_dag_runs(self, keys: Collection[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``keys`` ((dag_id, run_id) pairs) have a DAG run, in one indexed read."""
        if not keys:
            return set()
        query = sa.select(dag_runs.c.dag_id, dag_runs.c.run_id).where(self._of_runs(dag_runs, keys))
        with self._read(f"looking up {len(keys)} DAG run(s)") as conn:
            return {(dag_id, run_id) for dag_id, run_id in conn.execute(query)}
