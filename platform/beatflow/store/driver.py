"""Statements run straight on a pooled psycopg connection, past SQLAlchemy's execution and
result layers (PostgreSQL's hot statements: the node wrapper's read-and-claim and finish): a
statement compiled once per dialect, its rows read as mappings, driver errors as SQLAlchemy's."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import sqlalchemy as sa

from beatflow.store.engine import UTCDateTime


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
        raise driver_error(fairy, dialect, error, statement.sql, params) from error
    return statement.mappings(rows)


def driver_error(
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
