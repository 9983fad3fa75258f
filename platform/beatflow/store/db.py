"""The store's connection to its database: the engine, the backend of its dialect, and the three
ways a part of the store runs statements (a write, a read, a driver statement), each one short
transaction whose SQLAlchemy errors leave as beatflow's (``translate_errors``)."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from beatflow.store.backends import Backend, backend_for
from beatflow.store.driver import driver_error, driver_rows, driver_statement
from beatflow.store.engine import create_engine, translate_errors


class Db:
    """One database: its engine (a pool shared by the process's threads) and its backend."""

    def __init__(self, url: str, *, statement_timeout: float | None = None) -> None:
        self.url = url
        with translate_errors(url, "opening the database"):
            self.engine = create_engine(url, statement_timeout=statement_timeout)
        self.backend: Backend = backend_for(self.engine.dialect.name)
        _forget_connections_in_forked_children(self)

    @contextmanager
    def write(self, action: str, *, transaction: bool = False) -> Iterator[sa.Connection]:
        """Write through conditional statements, each atomic on its own.

        SQLite: one BEGIN IMMEDIATE transaction (the write lock is taken up front, so it never
        has to upgrade a read lock and fail with "database is locked"). PostgreSQL: autocommit,
        unless ``transaction`` asks for one: every store write is a single insert-or-conflict or
        an UPDATE whose WHERE clause PostgreSQL re-checks under the row lock, so an enclosing
        READ COMMITTED transaction would add nothing but two round trips (BEGIN, COMMIT).
        """
        with translate_errors(self.url, action), self.engine.connect() as conn:
            self.backend.prepare_write(conn, transaction=transaction)
            with conn.begin():
                yield conn

    @contextmanager
    def read(self, action: str) -> Iterator[sa.Connection]:
        """Reads: autocommit on PostgreSQL (each is one statement), a deferred one on SQLite."""
        with translate_errors(self.url, action), self.engine.connect() as conn:
            self.backend.prepare_read(conn)
            with conn.begin():
                yield conn

    def driver_rows(
        self, action: str, build: Callable[[], sa.Executable], params: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """PostgreSQL only: ``build()``'s statement (``driver_statement``) run in autocommit
        straight on a pooled psycopg connection (``driver_rows``), past SQLAlchemy's Connection
        as well (its checkout, execution options and transaction object cost the hot path
        about 40 us of CPU a statement). The connection goes back to the pool as it came, out
        of autocommit, so a ``begin()`` on it opens a transaction as before."""
        dialect = self.engine.dialect
        statement = driver_statement(build, dialect)
        with translate_errors(self.url, action):
            try:
                fairy = self.engine.raw_connection()
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
                raise driver_error(fairy, dialect, error, None, None) from error
            finally:
                fairy.close()


def _forget_connections_in_forked_children(db: Db) -> None:
    """A process forked after this store connected (a worker's pool child started after the
    reconciler's thread connected in the parent, a replacement for a terminated child) must not
    use the parent's pooled connections: two processes on one socket corrupt both. The child
    drops them without closing them (SQLAlchemy's ``dispose(close=False)``) and connects anew."""
    ref = weakref.ref(db)

    def reset() -> None:
        alive = ref()
        if alive is not None:
            alive.engine.dispose(close=False)

    os.register_at_fork(after_in_child=reset)
