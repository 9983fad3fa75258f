"""PostgreSQL: autocommit for single statements, an explicit transaction only where a write
takes several; the hot operations one round trip each, through the PL/pgSQL functions of the
migrations (``store/functions``) or a statement run on the driver (``Db.driver_rows``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from beatflow.store.backends import Backend, Runner
from beatflow.store.backends import pg_statements as pg
from beatflow.store.claim_sql import ClaimStatements
from beatflow.store.engine import dumps_json, utcnow
from beatflow.store.fan_in_sql import completed
from beatflow.store.models import dag_runs
from beatflow.store.node_sql import NO_ELEMENT
from beatflow.store.records import DagRunRecord, FinishedRun, TaskRunEnded, TriggeredRun
from beatflow.store.rows import dag_run_record
from beatflow.store.sql import oldest_first

# any constant: two processes migrating the same database take turns on it
MIGRATION_LOCK = 0x6265_6174_666C


class Postgres(Backend):
    name = "postgresql"

    @property
    def claims(self) -> ClaimStatements:
        return pg.claims()

    def insert(self, table: sa.Table) -> postgresql.Insert:
        return postgresql.insert(table)

    def of_runs(self, table: sa.Table, keys: Collection[tuple[str, str]]) -> sa.ColumnElement[bool]:
        """The keys are a join with two arrays: written as ``(dag_id, run_id) IN (...)``, the
        planner takes out a run id the keys share (every fire of one tick has the same) and
        probes each DAG by ``dag_id`` alone, reading every run the DAG ever had."""
        ordered = sorted(keys)
        text_array = postgresql.ARRAY(sa.String())
        wanted = (
            sa.func.unnest(
                sa.bindparam("p_key_dags", [d for d, _ in ordered], type_=text_array),
                sa.bindparam("p_key_runs", [r for _, r in ordered], type_=text_array),
            )
            .table_valued("dag_id", "run_id")
            .render_derived(name="wanted")
        )
        return sa.and_(table.c.dag_id == wanted.c.dag_id, table.c.run_id == wanted.c.run_id)

    def prepare_write(self, conn: sa.Connection, *, transaction: bool) -> None:
        if not transaction:
            conn.execution_options(isolation_level="AUTOCOMMIT")

    def prepare_read(self, conn: sa.Connection) -> None:
        conn.execution_options(isolation_level="AUTOCOMMIT")

    def lock_migrations(self, conn: sa.Connection) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK)))

    def take_turns(self, conn: sa.Connection, key: int) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))

    def latest_runs(
        self, conn: sa.Connection, dag_ids: Sequence[str], per_dag: int, columns: Sequence[Any]
    ) -> list[Any]:
        """One LATERAL query: an index range scan per DAG."""
        ids = (
            sa.func.unnest(sa.literal(list(dag_ids), sa.ARRAY(sa.String)))
            .table_valued("dag_id")
            .render_derived()
        )
        inner = (
            sa.select(*columns)
            .where(dag_runs.c.dag_id == ids.c.dag_id)
            .order_by(dag_runs.c.id.desc())
            .limit(per_dag)
            .lateral()
        )
        return list(conn.execute(sa.select(inner).select_from(ids.join(inner, sa.true()))))

    def create_and_start(
        self,
        db: Runner,
        values: dict[str, Any],
        max_active_runs: int,
        audit: dict[str, Any] | None = None,
    ) -> TriggeredRun:
        """``beatflow_create_and_start`` (migrations 0008, 0015, 0018): one round trip, the
        audit record's insert in the same statement."""
        params = {key: values[key] for key in pg.CREATE_AND_START_PARAMS}
        params.update(conf=dumps_json(values["conf"]), max=max_active_runs)
        statement = pg.create_and_start
        if audit is not None:
            statement = pg.create_start_and_audit
            params.update(
                audit_at=audit["at"],
                audit_actor=audit["actor"],
                audit_action=audit["action"],
                audit_detail=dumps_json(audit["detail"]),
            )
        action = f"creating and dispatching DAG run {values['dag_id']}/{values['run_id']}"
        rows = db.driver_rows(action, statement, params)
        own = next(r for r in rows if r["run_id"] == values["run_id"])
        started = [dag_run_record(r) for r in rows if r["is_started"]]
        return TriggeredRun(
            dag_run_record(own), bool(own["is_new"]), tuple(oldest_first(started, utcnow()))
        )

    def start_queued(self, db: Runner, dag_id: str, max_active_runs: int) -> list[DagRunRecord]:
        """``beatflow_start_queued`` (migrations 0007 ... 0016): the lock and the update."""
        with db.write(f"starting queued runs of DAG {dag_id}") as conn:
            rows = conn.execute(pg.START_QUEUED, {"d": dag_id, "m": max_active_runs}).mappings()
            started = [dag_run_record(r) for r in rows]
        return oldest_first(started, utcnow())

    def start_queued_many(
        self, db: Runner, max_active_runs: Mapping[str, int]
    ) -> dict[str, list[DagRunRecord]]:
        started: dict[str, list[DagRunRecord]] = {dag_id: [] for dag_id in max_active_runs}
        params = {"dag_ids": list(started), "maxes": list(max_active_runs.values())}
        with db.write(f"starting queued runs of {len(started)} DAG(s)") as conn:
            for row in conn.execute(pg.START_QUEUED_MANY, params).mappings():
                started[row["dag_id"]].append(dag_run_record(row))
        now = utcnow()
        return {dag_id: oldest_first(runs, now) for dag_id, runs in started.items()}

    def finish_and_close(
        self, db: Runner, action: str, params: dict[str, Any], max_active_runs: int
    ) -> FinishedRun:
        """``beatflow_finish_and_close`` (migration 0010): one round trip."""
        result = params["p_result"]
        call = {
            **params,
            "p_result": None if result is None else dumps_json(result),
            "p_max": max_active_runs,
        }
        rows = db.driver_rows(action, pg.finish_and_close, call)
        if [r["kind"] for r in rows] == ["lost"]:
            return FinishedRun(False)
        closed = next((dag_run_record(r) for r in rows if r["kind"] == "closed"), None)
        started = [dag_run_record(r) for r in rows if r["kind"] == "started"]
        return FinishedRun(True, closed, tuple(oldest_first(started, utcnow())))

    def read_and_claim(
        self, db: Runner, action: str, params: dict[str, Any], now: datetime, lease: float
    ) -> Sequence[Mapping[str, Any]]:
        """One written-out statement (``pg_statements.read_and_claim``)."""
        return db.driver_rows(action, pg.read_and_claim, {**NO_ELEMENT, **params})

    def finish_alone(
        self, db: Runner, action: str, params: dict[str, Any], *, counts: bool
    ) -> TaskRunEnded:
        """Every task run's finish: on the driver, with a .map() instance's fan-in count."""
        result = params["p_result"]
        params = {**params, "p_result": None if result is None else dumps_json(result)}
        if not counts:
            return TaskRunEnded(bool(db.driver_rows(action, pg.finish, params)))
        rows = db.driver_rows(action, pg.finish_counted, params)
        return TaskRunEnded(bool(rows), completed(rows[0]) if rows else None)


POSTGRES = Postgres()
