"""Engine construction (pooling, SQLite WAL and write locks), the UTC datetime column type, and the
translation of SQLAlchemy exceptions into beatflow's StoreError tree at the store's boundary.

Clock: every "now" (lease expiry, run timestamps) is the local UTC clock of the process calling
the store, never the database clock, so SQLite and PostgreSQL behave the same. Hosts running
workers must keep their clocks in sync (NTP) to well within ``lease_seconds``."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import tenacity
from sqlalchemy import event, exc
from sqlalchemy.pool import StaticPool

from beatflow.errors import StoreError, StoreUnavailableError
from beatflow.extras import require
from beatflow.settings import mask_url, psycopg_url

SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_CONNECT_TIMEOUT_S = 10
# execution option naming how a SQLite transaction begins ("IMMEDIATE" takes the write lock)
SQLITE_BEGIN = "beatflow_sqlite_begin"


def utcnow() -> datetime:
    """The store's clock: the local clock, in UTC, timezone-aware."""
    return datetime.now(UTC)


def require_aware(value: datetime, what: str) -> datetime:
    """Return ``value`` in UTC; a naive datetime is a caller bug, refused with a clear error."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise StoreError(
            f"{what}={value.isoformat()} has no time zone; pass a timezone-aware datetime "
            "(e.g. datetime.now(UTC))"
        )
    return value.astimezone(UTC)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Timestamps stored as UTC and always returned timezone-aware (SQLite keeps no zone)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        value = require_aware(value, "timestamp")
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # defensive: SQLite rows written by hand
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]


def dumps_json(value: Any) -> str:
    """Strict JSON: NaN/Infinity are refused (PostgreSQL rejects them), keys must be strings."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def is_sqlite(url: str | sa.URL) -> bool:
    return sa.make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str | sa.URL) -> Path | None:
    """The database file of a SQLite URL, None for an in-memory database."""
    database = sa.make_url(url).database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    return Path(database)


def create_engine(url: str, *, statement_timeout: float | None = None) -> sa.Engine:
    """A pooled engine: PostgreSQL via psycopg 3; SQLite in WAL mode with a busy
    timeout and explicit BEGIN (IMMEDIATE for writes, so claims serialise like on PostgreSQL).

    PostgreSQL connections send TCP keepalives (a half-open connection after a failover is
    noticed in ~30 s, not the kernel's ~15 min); ``statement_timeout`` (seconds) bounds every
    statement and the connect, for callers that must never hang (the beat)."""
    parsed = sa.make_url(psycopg_url(url))
    if parsed.get_backend_name() == "sqlite":
        return _create_sqlite_engine(parsed)
    if parsed.get_driver_name() == "psycopg":
        require("postgres", f"the database {mask_url(url)}")
    return sa.create_engine(
        parsed,
        # No pre-ping: it costs a round trip per checkout (a task run checks out four times).
        # A connection broken by a restart fails its statement, SQLAlchemy invalidates the
        # pool on the disconnect, and the caller retries on StoreUnavailableError.
        pool_pre_ping=False,
        pool_size=5,
        max_overflow=10,
        pool_recycle=1800,
        json_serializer=dumps_json,
        connect_args=_pg_connect_args(statement_timeout),
    )


def _pg_connect_args(statement_timeout: float | None) -> dict[str, Any]:
    args: dict[str, Any] = {
        "connect_timeout": PG_CONNECT_TIMEOUT_S,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }
    if statement_timeout is not None:
        args["connect_timeout"] = max(1, min(PG_CONNECT_TIMEOUT_S, round(statement_timeout)))
        args["options"] = f"-c statement_timeout={int(statement_timeout * 1000)}"
    return args


def _create_sqlite_engine(url: sa.URL) -> sa.Engine:
    kwargs: dict[str, Any] = {}
    if sqlite_path(url) is None:
        # one shared connection, or each pooled connection would see its own empty database
        kwargs["poolclass"] = StaticPool
    engine = sa.create_engine(
        url,
        json_serializer=dumps_json,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
        **kwargs,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin (pysqlite's implicit
        # BEGIN is deferred and skips DDL), then configure the connection.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        try:
            if sqlite_path(url) is not None:
                _use_wal(cursor)
                cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        mode = conn.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def _is_locked(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and "locked" in str(error)


# 5 ms, doubling up to 200 ms, until the busy timeout would pass; then the last error
_WAL_RETRIES = tenacity.Retrying(
    retry=tenacity.retry_if_exception(_is_locked),
    wait=tenacity.wait_exponential(multiplier=0.005, max=0.2),
    stop=tenacity.stop_before_delay(SQLITE_BUSY_TIMEOUT_MS / 1000),
    reraise=True,
)


def _use_wal(cursor: Any) -> None:
    """Switch the database to WAL (persistent; a no-op once done). The switch needs an exclusive
    lock and SQLite answers "database is locked" at once, without its busy handler, when several
    processes open a fresh database together: retry until the busy timeout."""
    for attempt in _WAL_RETRIES.copy():
        with attempt:
            if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")


def _is_unavailable(error: exc.SQLAlchemyError) -> bool:
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True
    return isinstance(
        error,
        exc.OperationalError | exc.InterfaceError | exc.DisconnectionError | exc.TimeoutError,
    )


@contextmanager
def translate_errors(url: str | sa.URL, action: str) -> Iterator[None]:
    """Re-raise SQLAlchemy errors as StoreUnavailableError (connection, locking, timeouts: retry
    later) or StoreError (anything else), chained, with the masked URL and what was being done."""
    try:
        yield
    except exc.SQLAlchemyError as error:
        where = _masked(url)
        detail = str(getattr(error, "orig", None) or error).strip().splitlines()
        reason = detail[0] if detail else type(error).__name__
        if _is_unavailable(error):
            raise StoreUnavailableError(
                f"results database {where} is unavailable while {action}: {reason}; "
                "check BEATFLOW_DATABASE_URL and that the database is up, then retry"
            ) from error
        raise StoreError(f"results database {where} refused {action}: {reason}") from error


def _masked(url: str | sa.URL) -> str:
    try:
        return mask_url(sa.make_url(url).render_as_string(hide_password=False))
    except exc.ArgumentError:  # not even a URL: say so without echoing a possible password
        return "(unparseable URL)"


def finite_seconds(value: float, what: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise StoreError(f"{what}={value!r}: expected a positive number of seconds")
    return float(value)
