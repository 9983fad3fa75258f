"""The dispatch of queued DAG runs under max_active_runs: queued -> running for a DAG's oldest
runs that fit, one winner among concurrent dispatchers (closers, triggers, reconcilers), for
one DAG or for a beat's batch of DAGs; and which runs of a set exist."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import sqlalchemy as sa

from beatflow.store.base import StoreBase
from beatflow.store.models import dag_runs, is_queued
from beatflow.store.records import DagRunRecord


class DispatchMixin(StoreBase):
    def start_queued_dag_runs(
        self, dag_id: str, max_active_runs: int, *, if_queued: bool = False
    ) -> list[DagRunRecord]:
        """queued -> running for the oldest queued runs (by logical date) that fit under
        ``max_active_runs``; returns the runs this call started, the caller sends them.
        ``if_queued``: first look (one indexed read, no lock) whether any run is queued, and
        stop there if none is.

        One winner: the count and the updates run after a per-DAG lock is held (SQLite: the
        database write lock of BEGIN IMMEDIATE; PostgreSQL: a transaction-scoped advisory lock
        taken by the function ``beatflow_start_queued``, one round trip), so concurrent
        dispatchers never start one run twice nor exceed the limit. The work is O(1) whatever
        the number of runs queued or running, plus the runs it starts: the DAG's running count
        (one row of dag_run_counts, migration 0012) and a LIMIT'ed select on the DAG's queued
        runs (their partial index, migration 0016), inside one UPDATE. The count row is read
        ``FOR UPDATE`` (migration 0015), so a trigger that inserted its run as running without
        the dispatch lock, and has not committed yet, is counted too.
        """
        if if_queued and not self._any_queued(dag_id):
            return []
        return self._backend.start_queued(self._db, dag_id, max_active_runs)

    def _any_queued(self, dag_id: str) -> bool:
        # in the partial index's order: SQLite, which has no statistics to tell the DAG's
        # queued runs from all DAGs', then picks that index over (state, id), which needs a sort
        query = (
            sa.select(dag_runs.c.id)
            .where(dag_runs.c.dag_id == dag_id, is_queued(dag_runs.c.state))
            .order_by(dag_runs.c.logical_date, dag_runs.c.id)
            .limit(1)
        )
        with self._read(f"looking for queued runs of DAG {dag_id}") as conn:
            return conn.execute(query).first() is not None

    def start_queued_dag_runs_of(
        self, max_active_runs: Mapping[str, int]
    ) -> dict[str, list[DagRunRecord]]:
        """``start_queued_dag_runs`` for each DAG of ``max_active_runs`` (dag_id -> limit) in
        one transaction (one round trip on PostgreSQL); dag_id -> the runs started, oldest
        first, for every DAG asked about. The per-DAG locks are taken in one global order, so
        concurrent batches never deadlock."""
        if not max_active_runs:
            return {}
        return self._backend.start_queued_many(self._db, max_active_runs)

    def existing_dag_runs(self, keys: Collection[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``keys`` ((dag_id, run_id) pairs) have a DAG run, in one indexed read."""
        if not keys:
            return set()
        query = sa.select(dag_runs.c.dag_id, dag_runs.c.run_id).where(self._of_runs(dag_runs, keys))
        with self._read(f"looking up {len(keys)} DAG run(s)") as conn:
            return {(dag_id, run_id) for dag_id, run_id in conn.execute(query)}
