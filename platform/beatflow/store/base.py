"""The store's plumbing shared by every part of it: the engine, short transactions (write
transactions take SQLite's write lock up front), error translation, row-to-record mapping."""

from __future__ import annotations

import enum
import functools
import os
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any, Self

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from beatflow.errors import ResultError
from beatflow.store.engine import (
    SQLITE_BEGIN,
    UTCDateTime,
    create_engine,
    dumps_json,
    finite_seconds,
    translate_errors,
)
from beatflow.store.records import DagRunRecord, DeadLetterRecord, TaskRunRecord

if TYPE_CHECKING:
    from beatflow.settings import Settings

RESULT_HINT = "put big data in object storage and return its key"


class StoreBase:
    """Holds the engine and the limits; the parts of ``Store`` build on its transactions."""

    def __init__(
        self,
        url: str,
        *,
        lease_seconds: float = 30.0,
        result_max_bytes: int = 1 << 20,
        statement_timeout: float | None = None,
    ) -> None:
        self.url = url
        self.lease_seconds = finite_seconds(lease_seconds, "lease_seconds")
        self.result_max_bytes = int(result_max_bytes)
        with translate_errors(url, "opening the database"):
            self._engine = create_engine(url, statement_timeout=statement_timeout)
        _forget_connections_in_forked_children(self)

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """A store for ``settings.database_url`` with its lease and result-size limits."""
        return cls(
            settings.database_url,
            lease_seconds=settings.lease_seconds,
            result_max_bytes=settings.result_max_bytes,
        )

    @property
    def dialect(self) -> str:
        """``postgresql`` or ``sqlite``."""
        return self._engine.dialect.name

    def close(self) -> None:
        """Close every pooled connection; the store must not be used afterwards."""
        self._engine.dispose()

    def _insert(self, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
        """An INSERT that supports ON CONFLICT on this backend."""
        if self.dialect == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    def _of_runs(
        self, table: sa.Table, keys: Collection[tuple[str, str]]
    ) -> sa.ColumnElement[bool]:
        """The rows of ``table`` that belong to the DAG runs of ``keys`` ((dag_id, run_id)
        pairs), as a WHERE criterion that probes the table's (dag_id, run_id) index once per
        key. On PostgreSQL the keys are a join with two arrays: written as ``(dag_id, run_id) IN
        (...)``, the planner takes out a run id the keys share (every fire of one tick has the
        same) and probes each DAG by ``dag_id`` alone, reading every run the DAG ever had."""
        ordered = sorted(keys)
        if self.dialect != "postgresql":
            return sa.tuple_(table.c.dag_id, table.c.run_id).in_(ordered)
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

    def check_result(self, dedupe_key: str, result: Any) -> None:
        """Raise ResultError unless ``result`` is JSON-serialisable within result_max_bytes."""
        try:
            size = len(dumps_json(result).encode())
        except (TypeError, ValueError) as exc:
            raise ResultError(
                f"task run {dedupe_key!r} returned a {type(result).__name__} that is not "
                f"JSON-serialisable ({exc}); return JSON values (dict, list, str, number, bool, "
                f"None) of at most {self.result_max_bytes} bytes; {RESULT_HINT}",
                dedupe_key=dedupe_key,
                limit=self.result_max_bytes,
            ) from exc
        if size > self.result_max_bytes:
            raise ResultError(
                f"task run {dedupe_key!r} returned {size} bytes of JSON, over the limit of "
                f"{self.result_max_bytes} bytes (BEATFLOW_RESULT_MAX_BYTES); {RESULT_HINT}",
                dedupe_key=dedupe_key,
                size=size,
                limit=self.result_max_bytes,
            )

    @contextmanager
    def _write(self, action: str, *, transaction: bool = False) -> Iterator[sa.Connection]:
        """Write through conditional statements, each atomic on its own.

        SQLite: one BEGIN IMMEDIATE transaction (the write lock is taken up front, so it never
        has to upgrade a read lock and fail with "database is locked"). PostgreSQL: autocommit,
        unless ``transaction`` asks for one: every store write is a single insert-or-conflict or
        an UPDATE whose WHERE clause PostgreSQL re-checks under the row lock, so an enclosing
        READ COMMITTED transaction would add nothing but two round trips (BEGIN, COMMIT).
        """
        with translate_errors(self.url, action), self._engine.connect() as conn:
            if self.dialect == "sqlite":
                conn.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})
            elif not transaction:
                conn.execution_options(isolation_level="AUTOCOMMIT")
            with conn.begin():
                yield conn

    def _driver_rows(
        self, action: str, build: Callable[[], sa.Executable], params: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """PostgreSQL only: ``build()``'s statement (``driver_statement``) run in autocommit
        straight on a pooled psycopg connection (``driver_rows``), past SQLAlchemy's Connection
        as well (its checkout, execution options and transaction object cost the hot path
        about 40 us of CPU a statement). The connection goes back to the pool as it came, out
        of autocommit, so a ``begin()`` on it opens a transaction as before."""
        dialect = self._engine.dialect
        statement = driver_statement(build, dialect)
        with translate_errors(self.url, action):
            try:
                fairy = self._engine.raw_connection()
            except dialect.loaded_dbapi.Error as error:  # connecting failed: nothing to invalidate
                raise sa.exc.DBAPIError.instance(
                    None, None, error, dialect.loaded_dbapi.Error, dialect=dialect
                ) from error
            try:
                driver: Any = fairy.driver_connection
                driver.autocommit = True
                try:
                    return driver_rows(fairy, dialect, statement, params)
                finally:
                    if fairy.is_valid:
                        driver.autocommit = False
            except dialect.loaded_dbapi.Error as error:  # switching autocommit failed
                raise _driver_error(fairy, dialect, error, None, None) from error
            finally:
                fairy.close()

    @contextmanager
    def _read(self, action: str) -> Iterator[sa.Connection]:
        """Reads: autocommit on PostgreSQL (each is one statement), a deferred one on SQLite."""
        with translate_errors(self.url, action), self._engine.connect() as conn:
            if self.dialect != "sqlite":
                conn.execution_options(isolation_level="AUTOCOMMIT")
            with conn.begin():
                yield conn


def _forget_connections_in_forked_children(store: StoreBase) -> None:
    """A process forked after this store connected (a worker's pool child started after the
    reconciler's thread connected in the parent, a replacement for a terminated child) must not
    use the parent's pooled connections: two processes on one socket corrupt both. The child
    drops them without closing them (SQLAlchemy's ``dispose(close=False)``) and connects anew."""
    ref = weakref.ref(store)

    def reset() -> None:
        alive = ref()
        if alive is not None:
            alive._engine.dispose(close=False)

    os.register_at_fork(after_in_child=reset)


@dataclass(frozen=True)
class DriverStatement:
    """A statement as the driver takes it (psycopg's ``%(name)s`` parameters, no SQLAlchemy
    processing either way), and how to read its rows: ``columns`` names them in order,
    ``times`` are the positions of its timestamps (handed back in UTC, as UTCDateTime does).
    ``defaults``: the values the statement binds itself (its literals), under what is given."""

    sql: str
    columns: tuple[str, ...]
    times: frozenset[int]
    defaults: Mapping[str, Any]

    def mappings(self, rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
        out = []
        for row in rows:
            values = list(row)
            for i in self.times:
                if values[i] is not None:
                    values[i] = values[i].astimezone(UTC)
            out.append(dict(zip(self.columns, values, strict=True)))
        return out


@functools.cache
def driver_statement(build: Callable[[], sa.Executable], dialect: sa.Dialect) -> DriverStatement:
    """``build()`` (a statement returning rows: a text with typed result columns, or an
    INSERT/UPDATE with RETURNING) compiled once for ``dialect``."""
    statement: Any = build()
    compiled = statement.compile(dialect=dialect)
    selected = getattr(statement, "selected_columns", None)
    columns = list(statement.exported_columns if selected is None else selected)
    return DriverStatement(
        sql=str(compiled),
        columns=tuple(c.name for c in columns),
        times=frozenset(i for i, c in enumerate(columns) if isinstance(c.type, UTCDateTime)),
        defaults={
            k: v.value if isinstance(v, enum.Enum) else v for k, v in compiled.params.items()
        },
    )


def driver_rows(
    fairy: Any, dialect: sa.Dialect, statement: DriverStatement, params: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Run ``statement`` on the psycopg connection of ``fairy`` (a pooled connection), past
    SQLAlchemy's execution and result layers: for the node wrapper's statements, where those
    layers (a column object per result column and call, type processors, row proxies) cost the
    client more CPU than PostgreSQL spends on the statement. Parameters go as they are (the SQL
    casts each one). A driver error comes back as SQLAlchemy's, and a lost connection is
    invalidated, so ``translate_errors`` and the pool treat it as they treat any statement's."""
    dbapi = dialect.loaded_dbapi
    try:
        with fairy.driver_connection.cursor() as cursor:
            cursor.execute(statement.sql, {**statement.defaults, **params})
            rows = cursor.fetchall()  # every DriverStatement returns rows
    except dbapi.Error as error:
        raise _driver_error(fairy, dialect, error, statement.sql, params) from error
    return statement.mappings(rows)


def _driver_error(
    fairy: Any, dialect: sa.Dialect, error: Any, sql: str | None, params: Any
) -> sa.exc.StatementError:
    """``error`` (the driver's) as SQLAlchemy's; a lost connection is invalidated first."""
    gone = dialect.is_disconnect(error, fairy.dbapi_connection, None)
    if gone:
        fairy.invalidate(error)
    wrapped: sa.exc.StatementError = sa.exc.DBAPIError.instance(
        sql,
        None if params is None else dict(params),
        error,
        dialect.loaded_dbapi.Error,
        connection_invalidated=gone,
        dialect=dialect,
    )
    return wrapped


def dag_run_record(row: Mapping[Any, Any], prefix: str = "") -> DagRunRecord:
    """The DAG run of ``row``, whose columns are named ``prefix`` + the column's name (a read
    that joins the run to its task runs names the run's columns ``r_...``)."""
    p = prefix
    return DagRunRecord(
        dag_id=row[p + "dag_id"],
        run_id=row[p + "run_id"],
        logical_date=row[p + "logical_date"],
        trigger=row[p + "trigger"],
        conf=dict(row[p + "conf"] or {}),
        state=row[p + "state"],
        queued_at=row[p + "queued_at"],
        started_at=row[p + "started_at"],
        ended_at=row[p + "ended_at"],
        leader_epoch=row[p + "leader_epoch"],
        failure_reason=row.get(p + "failure_reason"),
        resume_count=row.get(p + "resume_count") or 0,
        followed=bool(row.get(p + "followed")),
    )


def task_run_record(row: Mapping[Any, Any], prefix: str = "") -> TaskRunRecord:
    """The task run of ``row``, whose columns are named ``prefix`` + the column's name."""
    p = prefix
    return TaskRunRecord(
        dedupe_key=row[p + "dedupe_key"],
        dag_id=row[p + "dag_id"],
        run_id=row[p + "run_id"],
        task_id=row[p + "task_id"],
        map_index=row[p + "map_index"],
        state=row[p + "state"],
        try_number=row[p + "try_number"],
        worker=row[p + "worker"],
        celery_task_id=row[p + "celery_task_id"],
        lease_expires_at=row[p + "lease_expires_at"],
        started_at=row[p + "started_at"],
        ended_at=row[p + "ended_at"],
        result=row[p + "result"],
        error=row[p + "error"],
        traceback=row[p + "traceback"],
        map_count=row.get(p + "map_count"),
        deduped_from=row.get(p + "deduped_from"),
    )


def dead_letter_record(row: sa.RowMapping) -> DeadLetterRecord:
    return DeadLetterRecord(
        id=row["id"],
        dedupe_key=row["dedupe_key"],
        dag_id=row["dag_id"],
        run_id=row["run_id"],
        task_id=row["task_id"],
        map_index=row["map_index"],
        args=dict(row["args"] or {}),
        conf=dict(row["conf"] or {}),
        error=row["error"],
        traceback=row["traceback"],
        tries=row["tries"],
        created_at=row["created_at"],
        replayed_at=row["replayed_at"],
    )
