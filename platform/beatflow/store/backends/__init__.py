"""A backend per dialect: what differs between PostgreSQL and SQLite, chosen once when the store
opens its engine (``backend_for``), so no part of the store asks which database it is on.

A backend holds the dialect's statements (the claim protocol on its clock, its insert with ON
CONFLICT, how a set of runs is looked up) and runs the operations whose shape differs: one
round trip through a PL/pgSQL function or a written-out statement on PostgreSQL, one BEGIN
IMMEDIATE transaction of plain statements on SQLite."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, ClassVar, Protocol

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from beatflow.errors import StoreError
from beatflow.store.claim_sql import ClaimStatements
from beatflow.store.records import DagRunRecord, FinishedRun, TaskRunEnded, TriggeredRun


class Runner(Protocol):
    """How a backend runs statements: the store's short transactions (``store/db.py``)."""

    def write(
        self, action: str, *, transaction: bool = False
    ) -> AbstractContextManager[sa.Connection]: ...

    def read(self, action: str) -> AbstractContextManager[sa.Connection]: ...

    def driver_rows(
        self, action: str, build: Callable[[], sa.Executable], params: Mapping[str, Any]
    ) -> list[dict[str, Any]]: ...


class Backend(ABC):
    """The dialect-specific half of the store (see the module docstring)."""

    name: ClassVar[str]

    # ------------------------------------------------------------------ statements

    @property
    @abstractmethod
    def claims(self) -> ClaimStatements:
        """The claim protocol's statements on this backend's clock."""

    @abstractmethod
    def insert(self, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
        """An INSERT that supports ON CONFLICT."""

    @abstractmethod
    def of_runs(self, table: sa.Table, keys: Collection[tuple[str, str]]) -> sa.ColumnElement[bool]:
        """The rows of ``table`` that belong to the DAG runs of ``keys`` ((dag_id, run_id)
        pairs), as a WHERE criterion that probes the table's (dag_id, run_id) index per key."""

    def lock_rows(self, select: sa.Select[Any]) -> sa.Select[Any]:
        """``select`` locking the rows it reads until commit (where row locks exist)."""
        return select.with_for_update()

    # ------------------------------------------------------------------ connections

    @abstractmethod
    def prepare_write(self, conn: sa.Connection, *, transaction: bool) -> None:
        """Set up ``conn`` for a write (see ``Db.write``)."""

    @abstractmethod
    def prepare_read(self, conn: sa.Connection) -> None:
        """Set up ``conn`` for a read (see ``Db.read``)."""

    @abstractmethod
    def lock_migrations(self, conn: sa.Connection) -> None:
        """Make processes that migrate the same database take turns (in ``conn``'s
        transaction, released at its end)."""

    @abstractmethod
    def take_turns(self, conn: sa.Connection, key: int) -> None:
        """Make the write transactions that call this with ``key`` run one at a time (from
        here in ``conn``'s transaction to its end)."""

    # ------------------------------------------------------------------ operations

    @abstractmethod
    def latest_runs(
        self, conn: sa.Connection, dag_ids: Sequence[str], per_dag: int, columns: Sequence[Any]
    ) -> list[Any]:
        """``columns`` of the newest ``per_dag`` runs (by id) of each of ``dag_ids``."""

    @abstractmethod
    def create_and_start(
        self,
        db: Runner,
        values: dict[str, Any],
        max_active_runs: int,
        audit: dict[str, Any] | None = None,
    ) -> TriggeredRun:
        """Insert the run of ``values`` (``sql.run_values``) or find it, and when it is queued
        start the DAG's oldest queued runs under ``max_active_runs``, in one transaction; with
        the ``audit`` record (``audit.audit_values``) of who asked, in the same one."""

    @abstractmethod
    def start_queued(self, db: Runner, dag_id: str, max_active_runs: int) -> list[DagRunRecord]:
        """queued -> running for the DAG's oldest runs under the limit, under its dispatch
        lock; the runs started, oldest first."""

    @abstractmethod
    def start_queued_many(
        self, db: Runner, max_active_runs: Mapping[str, int]
    ) -> dict[str, list[DagRunRecord]]:
        """``start_queued`` for each DAG of ``max_active_runs`` in one transaction, the
        per-DAG locks taken in one global order; dag_id -> runs started, oldest first."""

    @abstractmethod
    def finish_and_close(
        self, db: Runner, action: str, params: dict[str, Any], max_active_runs: int
    ) -> FinishedRun:
        """A task run's success, its DAG run's end and the dispatch it frees, in one
        transaction under the DAG's dispatch lock (``HotPathMixin.finish_and_close``).
        ``params``: p_key, p_token, p_result, p_ended_at, p_dag_id, p_run_id, p_run_state."""

    @abstractmethod
    def read_and_claim(
        self, db: Runner, action: str, params: dict[str, Any], now: datetime, lease: float
    ) -> Sequence[Mapping[str, Any]]:
        """The rows of ``HotPathMixin.read_and_claim``: the run's (``r_``) and task runs'
        (``t_``) columns, ``t_claimed`` true on the row of a claim this call inserted."""

    def finish_alone(
        self, db: Runner, action: str, params: dict[str, Any], *, counts: bool
    ) -> TaskRunEnded | None:
        """A task run's finish that writes nothing else, in one round trip where the backend
        has one (None: none here, the caller writes it in its transaction)."""
        return None


def backend_for(dialect: str) -> Backend:
    """The backend of a SQLAlchemy dialect name (one instance per dialect and process)."""
    from beatflow.store.backends.postgresql import POSTGRES
    from beatflow.store.backends.sqlite import SQLITE

    for backend in (POSTGRES, SQLITE):
        if backend.name == dialect:
            return backend
    raise StoreError(f"beatflow's store has no backend for {dialect!r} databases")
