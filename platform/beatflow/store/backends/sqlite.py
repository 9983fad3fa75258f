"""SQLite (the embedded default): every write one BEGIN IMMEDIATE transaction, which holds the
database's write lock from its start, so the multi-statement operations PostgreSQL runs in a
function (create and start, finish and close, read and claim) are plain statements here, one
after another under that lock. Lease times are bound from the host's clock (it is the
database's: every process using the file runs on its host)."""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from beatflow.store.backends import Backend, Runner
from beatflow.store.claim_sql import ClaimStatements, build_claim_statements, fresh_lease
from beatflow.store.engine import SQLITE_BEGIN, UTCDateTime, utcnow
from beatflow.store.models import audit_events, dag_runs
from beatflow.store.node_sql import ELEMENT_PARAMS, node_read
from beatflow.store.records import (
    DAG_QUEUED,
    DAG_RUN_ACTIVE_STATES,
    DAG_RUN_FINISHED_STATES,
    TASK_SUCCESS,
    DagRunRecord,
    FinishedRun,
    TriggeredRun,
)
from beatflow.store.rows import dag_run_record
from beatflow.store.sql import insert_runs, oldest_first, start_oldest, transition_statement


@functools.cache
def _claims() -> ClaimStatements:
    now = sa.bindparam("p_now", type_=UTCDateTime())
    expires = sa.bindparam("p_lease_expires_at", type_=UTCDateTime())
    return build_claim_statements(sqlite.insert, now, expires)


class Sqlite(Backend):
    name = "sqlite"

    @property
    def claims(self) -> ClaimStatements:
        return _claims()

    def insert(self, table: sa.Table) -> sqlite.Insert:
        return sqlite.insert(table)

    def of_runs(self, table: sa.Table, keys: Collection[tuple[str, str]]) -> sa.ColumnElement[bool]:
        return sa.tuple_(table.c.dag_id, table.c.run_id).in_(sorted(keys))

    def lock_rows(self, select: sa.Select[Any]) -> sa.Select[Any]:
        return select  # the write transaction holds the database's lock already

    def prepare_write(self, conn: sa.Connection, *, transaction: bool) -> None:
        conn.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})

    def prepare_read(self, conn: sa.Connection) -> None:
        pass  # a deferred transaction: a consistent snapshot, no lock until it writes

    def lock_migrations(self, conn: sa.Connection) -> None:
        pass  # migrations run in a BEGIN IMMEDIATE transaction: the write lock

    def take_turns(self, conn: sa.Connection, key: int) -> None:
        pass  # every write is a BEGIN IMMEDIATE transaction: they take turns already

    def latest_runs(
        self, conn: sa.Connection, dag_ids: Sequence[str], per_dag: int, columns: Sequence[Any]
    ) -> list[Any]:
        """One indexed read per DAG (no LATERAL)."""
        rows: list[Any] = []
        for dag_id in dag_ids:
            query = (
                sa.select(*columns)
                .where(dag_runs.c.dag_id == dag_id)
                .order_by(dag_runs.c.id.desc())
                .limit(per_dag)
            )
            rows.extend(conn.execute(query))
        return rows

    def create_and_start(
        self,
        db: Runner,
        values: dict[str, Any],
        max_active_runs: int,
        audit: dict[str, Any] | None = None,
    ) -> TriggeredRun:
        dag_id, run_id = values["dag_id"], values["run_id"]
        action = f"creating and dispatching DAG run {dag_id}/{run_id}"
        with db.write(action) as conn:  # BEGIN IMMEDIATE: SQLite's write lock from here
            ((run, created),) = insert_runs(conn, self, [values])
            if audit is not None:
                conn.execute(sa.insert(audit_events).values(**audit))
            if run.state != DAG_QUEUED:
                return TriggeredRun(run, created, ())
            now = utcnow()
            moved = conn.execute(start_oldest(dag_id, max_active_runs, now)).mappings()
            started = [dag_run_record(r) for r in moved]
        run = next((r for r in started if r.run_id == run_id), run)
        return TriggeredRun(run, created, tuple(oldest_first(started, now)))

    def start_queued(self, db: Runner, dag_id: str, max_active_runs: int) -> list[DagRunRecord]:
        with db.write(f"starting queued runs of DAG {dag_id}") as conn:
            now = utcnow()  # read once BEGIN IMMEDIATE holds the write lock
            rows = conn.execute(start_oldest(dag_id, max_active_runs, now)).mappings()
            started = [dag_run_record(r) for r in rows]
        return oldest_first(started, now)

    def start_queued_many(
        self, db: Runner, max_active_runs: Mapping[str, int]
    ) -> dict[str, list[DagRunRecord]]:
        started: dict[str, list[DagRunRecord]] = {}
        with db.write(f"starting queued runs of {len(max_active_runs)} DAG(s)") as conn:
            now = utcnow()
            for dag_id, limit in max_active_runs.items():
                rows = conn.execute(start_oldest(dag_id, limit, now)).mappings()
                started[dag_id] = [dag_run_record(r) for r in rows]
        return {dag_id: oldest_first(runs, now) for dag_id, runs in started.items()}

    def finish_and_close(
        self, db: Runner, action: str, params: dict[str, Any], max_active_runs: int
    ) -> FinishedRun:
        dag_id, run_id, now = params["p_dag_id"], params["p_run_id"], params["p_ended_at"]
        finish = {
            "p_key": params["p_key"],
            "p_token": params["p_token"],
            "p_state": TASK_SUCCESS,
            "p_result": params["p_result"],
            "p_error": None,
            "p_traceback": None,
            "p_ended_at": now,
            "p_map_count": None,
        }
        run_state = params["p_run_state"]
        close = transition_statement(dag_id, run_id, run_state, DAG_RUN_ACTIVE_STATES, now)
        with db.write(action) as conn:  # BEGIN IMMEDIATE: SQLite's write lock throughout
            if conn.execute(self.claims.finish, finish).first() is None:
                return FinishedRun(False)
            row = conn.execute(close).mappings().first()
            if row is None:
                return FinishedRun(True)
            moved = conn.execute(start_oldest(dag_id, max_active_runs, now)).mappings()
            started = [dag_run_record(m) for m in moved]
        return FinishedRun(True, dag_run_record(row), tuple(oldest_first(started, now)))

    def read_and_claim(
        self, db: Runner, action: str, params: dict[str, Any], now: datetime, lease: float
    ) -> Sequence[Mapping[str, Any]]:
        """The read, then the insert if the rows make the claim certain, in one transaction."""
        with db.write(action) as conn:
            names = ("p_dag_id", "p_run_id", "p_keys", *ELEMENT_PARAMS)
            read = {k: params[k] for k in names if k in params}
            statement = node_read(False, True, "p_element_key" in params)
            rows = [
                {**row, "t_claimed": False}
                for row in conn.execute(statement, read).mappings().all()
            ]
            if not rows or rows[0]["r_state"] in DAG_RUN_FINISHED_STATES:
                return rows
            own = params["p_dedupe_key"]
            found = {r["t_dedupe_key"]: r for r in rows if r["t_dedupe_key"]}
            wanted = set(params["p_ready_keys"])
            ready = [
                r
                for key, r in found.items()
                if key in wanted
                and r["t_state"] == TASK_SUCCESS
                and (r["t_dag_id"], r["t_run_id"]) == (params["p_dag_id"], params["p_run_id"])
            ]
            if own in found or len(ready) != params["p_ready"]:
                return rows
            claim = {
                **{k: params[k] for k in ("p_dedupe_key", "p_dag_id", "p_run_id", "p_task_id")},
                "p_map_index": params["p_map_index"],
                **fresh_lease(
                    now,
                    lease,
                    params["p_lease_token"],
                    worker=params["p_worker"],
                    celery_task_id=params["p_celery_task_id"],
                ),
            }
            claimed = conn.execute(self.claims.insert, claim).mappings().first()
            if claimed is None:
                return rows
            run_part = {k: v for k, v in rows[0].items() if k.startswith("r_")}
            task_part = {f"t_{k}": v for k, v in claimed.items()}
            rows.append({**run_part, **task_part, "t_claimed": True})
            return cast(list[dict[str, Any]], rows)


SQLITE = Sqlite()
