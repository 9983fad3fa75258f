"""The results database schema as SQLAlchemy 2 models. Alembic migrations (``migrations/``) create
it; a test checks that the migrated database and these models never drift apart."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from beatflow.store.engine import UTCDateTime

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON(none_as_null=True)
# the predicates of the partial indexes over running and queued rows; a query that is to use
# one names the state as this literal (a bound parameter's value does not imply an index
# predicate)
RUNNING = sa.text("state = 'running'")
# the running task runs' index (migration 0017): only a query that also bounds the lease, as the
# stuck-run scans do, implies it; a finish or renewal names its key, so goes by the key's index
RUNNING_LEASED = sa.text("state = 'running' AND lease_expires_at IS NOT NULL")
QUEUED = sa.text("state = 'queued'")
# the history indexes hold no active run (migration 0016), so no lookup of queued or running
# rows can be planned through them when the statistics say such rows are rare
FINAL = sa.text("state NOT IN ('queued', 'running')")
ENDED = sa.text("ended_at IS NOT NULL")


def is_running(state: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """``state = 'running'`` with the state inline, so the partial indexes over running rows
    (``RUNNING``) serve the query."""
    return state == sa.literal_column("'running'", sa.String())


def is_queued(state: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """``state = 'queued'`` with the state inline, so the partial index over queued rows
    (``QUEUED``) serves the query."""
    return state == sa.literal_column("'queued'", sa.String())


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UTCDateTime()}


class DagRun(Base):
    """One run of a DAG; (dag_id, run_id) is unique so a double trigger makes one run."""

    __tablename__ = "dag_runs"
    __table_args__ = (
        sa.UniqueConstraint("dag_id", "run_id"),
        # a DAG's running runs, for the free-slot count (migration 0009: only running rows)
        sa.Index(
            "ix_dag_runs_running_dag_id", "dag_id", postgresql_where=RUNNING, sqlite_where=RUNNING
        ),
        sa.Index(None, "dag_id", "logical_date"),
        sa.Index(None, "queued_at"),
        # finished runs in end order, for the prune
        sa.Index("ix_dag_runs_ended_at", "ended_at", postgresql_where=ENDED, sqlite_where=ENDED),
        # a DAG's queued runs in dispatch order (migration 0016: only queued rows)
        sa.Index(
            "ix_dag_runs_queued_dag_id",
            "dag_id",
            "logical_date",
            "id",
            postgresql_where=QUEUED,
            sqlite_where=QUEUED,
        ),
        sa.Index(None, "dag_id", "id"),  # a DAG's newest runs (web pages, keyset pagination)
        # a state's runs newest first (the runs page); whole on SQLite, where a partial index
        # serves only a query naming its predicate
        sa.Index("ix_dag_runs_state_id", "state", "id", postgresql_where=FINAL),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(sa.String(250))
    run_id: Mapped[str] = mapped_column(sa.String(250))
    logical_date: Mapped[datetime | None]
    trigger: Mapped[str] = mapped_column(sa.String(20))
    conf: Mapped[dict[str, Any]] = mapped_column(Json)
    state: Mapped[str] = mapped_column(sa.String(20))
    queued_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    leader_epoch: Mapped[int | None] = mapped_column(sa.BigInteger)
    # the reconciler: runs it resumed (re-sent), and not before when it may resume this one again
    resume_count: Mapped[int] = mapped_column(sa.Integer, server_default="0")
    resume_after: Mapped[datetime | None]
    # why the beat recorded this scheduled run as failed without running it (e.g. a bad conf)
    failure_reason: Mapped[str | None] = mapped_column(sa.Text)
    # someone follows the run (migration 0013): its end is announced on Redis only then
    followed: Mapped[bool] = mapped_column(sa.Boolean, server_default=sa.false())


class TaskRun(Base):
    """The latest try of one dedupe key: the claim (lease token and expiry), result or error."""

    __tablename__ = "task_runs"
    __table_args__ = (
        sa.UniqueConstraint("dedupe_key"),
        sa.Index(None, "dag_id", "run_id"),
        sa.Index(None, "celery_task_id"),  # beatflow.task_value (migration 0021)
        # stuck task runs (migrations 0009 and 0017: only running rows, and only for a query
        # that bounds their lease)
        sa.Index(
            "ix_task_runs_running_lease_expires_at",
            "lease_expires_at",
            postgresql_where=RUNNING_LEASED,
            sqlite_where=RUNNING_LEASED,
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    dedupe_key: Mapped[str] = mapped_column(sa.String(1000))
    dag_id: Mapped[str] = mapped_column(sa.String(250))
    run_id: Mapped[str] = mapped_column(sa.String(250))
    task_id: Mapped[str] = mapped_column(sa.String(250))
    map_index: Mapped[int] = mapped_column(sa.Integer)
    state: Mapped[str] = mapped_column(sa.String(20))
    try_number: Mapped[int] = mapped_column(sa.Integer)
    worker: Mapped[str | None] = mapped_column(sa.String(250))
    celery_task_id: Mapped[str | None] = mapped_column(sa.String(250))
    lease_token: Mapped[str | None] = mapped_column(sa.String(64))
    lease_expires_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    result: Mapped[Any] = mapped_column(Json, nullable=True)
    error: Mapped[str | None] = mapped_column(sa.Text)
    traceback: Mapped[str | None] = mapped_column(sa.Text)
    # out of band, never read from the result: a .map() task's instance count (migration 0002)
    map_count: Mapped[int | None] = mapped_column(sa.Integer)
    # the run whose task run did the side effect, for a dedupe key shared across runs (0002)
    deduped_from: Mapped[str | None] = mapped_column(sa.String(250))
    # tries made before the last clear or replay (migration 0020): retries count from there
    tries_before: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))


class DeadLetter(Base):
    """A task run that exhausted its retries: its arguments, conf and last error, for replay."""

    __tablename__ = "dead_letters"
    __table_args__ = (
        sa.Index(None, "dag_id", "run_id"),
        sa.Index(None, "replayed_at", "dag_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    dedupe_key: Mapped[str] = mapped_column(sa.String(1000))
    dag_id: Mapped[str] = mapped_column(sa.String(250))
    run_id: Mapped[str] = mapped_column(sa.String(250))
    task_id: Mapped[str] = mapped_column(sa.String(250))
    map_index: Mapped[int] = mapped_column(sa.Integer)
    args: Mapped[dict[str, Any]] = mapped_column(Json)
    conf: Mapped[dict[str, Any]] = mapped_column(Json)
    error: Mapped[str] = mapped_column(sa.Text)
    traceback: Mapped[str | None] = mapped_column(sa.Text)
    tries: Mapped[int] = mapped_column(sa.Integer)
    created_at: Mapped[datetime]
    replayed_at: Mapped[datetime | None]
    # closed without a replay, and why (migration 0020): its run marked, its task cleared, a
    # newer letter of the same task run; a replay of it is refused
    closed_at: Mapped[datetime | None]
    closed_reason: Mapped[str | None] = mapped_column(sa.Text)


class BeatTerm(Base):
    """The newest beat leader epoch the results DB has seen: runs from older epochs are refused
    (the fence a paused, deposed leader hits when it wakes up)."""

    __tablename__ = "beat_terms"

    name: Mapped[str] = mapped_column(sa.String(50), primary_key=True)
    epoch: Mapped[int] = mapped_column(sa.BigInteger)
    updated_at: Mapped[datetime]


class DagRunCount(Base):
    """A DAG's running runs, kept by triggers on dag_runs (migration 0012) in the transaction
    that changes a run, so a dispatch reads its free slots off one row, whatever the number
    running."""

    __tablename__ = "dag_run_counts"

    dag_id: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    running: Mapped[int] = mapped_column(sa.Integer)


class DagState(Base):
    """Per-DAG switches that must survive restarts (pause)."""

    __tablename__ = "dag_states"

    dag_id: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    paused: Mapped[bool] = mapped_column(sa.Boolean)
    updated_at: Mapped[datetime]


class AuditEvent(Base):
    """Who did what to which DAG or run, when and why (operators' verbs, web actions)."""

    __tablename__ = "audit_events"
    __table_args__ = (
        sa.Index(None, "dag_id", "run_id"),
        sa.Index(None, "at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(sa.String(250))
    action: Mapped[str] = mapped_column(sa.String(50))
    dag_id: Mapped[str | None] = mapped_column(sa.String(250))
    run_id: Mapped[str | None] = mapped_column(sa.String(250))
    detail: Mapped[dict[str, Any]] = mapped_column(Json)


class TaskLog(Base):
    """A batch of log lines of one try of one task run, as its worker captured them (web UI)."""

    __tablename__ = "task_logs"
    __table_args__ = (
        sa.Index(None, "dag_id", "run_id", "task_id", "map_index", "try_number", "id"),
        sa.Index(None, "created_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(sa.String(250))
    run_id: Mapped[str] = mapped_column(sa.String(250))
    task_id: Mapped[str] = mapped_column(sa.String(250))
    map_index: Mapped[int] = mapped_column(sa.Integer)
    try_number: Mapped[int] = mapped_column(sa.Integer)
    created_at: Mapped[datetime]
    lines: Mapped[list[dict[str, Any]]] = mapped_column(Json)


class MapItem(Base):
    """One .map() instance's item of the list its task maps over, written once when the task
    expands (migration 0011), so an instance reads its item by key: O(1) work whatever the
    list's length (``result -> i`` parses the whole list on every read)."""

    __tablename__ = "map_items"

    dag_id: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    task_id: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    map_index: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    # a None item is JSON null, never SQL NULL: NULL means "no row", read as the source's item
    item: Mapped[Any] = mapped_column(sa.JSON(none_as_null=False))


class MapFanIn(Base):
    """A .map() expansion's fan-in (migration 0014): its instances (``total``), how many have
    ended (``final``, counted by the statements that end them), and what follows the expander
    in its canvas (``canvas``), sent by the worker whose instance ends last."""

    __tablename__ = "map_fan_ins"

    dag_id: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    task_id: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    total: Mapped[int] = mapped_column(sa.Integer)
    final: Mapped[int] = mapped_column(sa.Integer, server_default="0")
    canvas: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)


class Notification(Base):
    """A notifier's event (migration 0019): the outbox row a task's or a DAG run's end writes
    once its state is committed (``pending``), claimed by the one delivery that sends it
    (``sending``), then ``sent`` or ``failed``. Its key makes a redelivered or duplicated event
    send at most once."""

    __tablename__ = "notifications"
    __table_args__ = (sa.Index(None, "state", "created_at"), sa.Index(None, "dag_id", "run_id"))

    event_key: Mapped[str] = mapped_column(sa.String(1024), primary_key=True)
    dag_id: Mapped[str] = mapped_column(sa.String(250))
    run_id: Mapped[str] = mapped_column(sa.String(250))
    kind: Mapped[str] = mapped_column(sa.String(20))
    state: Mapped[str] = mapped_column(sa.String(20))
    payload: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime]
    claimed_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    tries: Mapped[int] = mapped_column(sa.Integer, server_default="0")
    error: Mapped[str | None] = mapped_column(sa.Text, nullable=True)


class SensorPoke(Base):
    """A sensor task run's pokes in reschedule mode (migration 0022), kept across its pokes:
    which try they belong to (a retry starts the count and the timeout afresh), how many were
    made, when the first was (its timeout runs from there) and when the next is due (the
    reconciler re-sends a sensor whose next poke is overdue and whose message was lost)."""

    __tablename__ = "sensor_pokes"
    __table_args__ = (sa.Index(None, "dag_id", "run_id"),)

    dedupe_key: Mapped[str] = mapped_column(sa.String(1000), primary_key=True)
    dag_id: Mapped[str] = mapped_column(sa.String(250))
    run_id: Mapped[str] = mapped_column(sa.String(250))
    task_id: Mapped[str] = mapped_column(sa.String(250))
    map_index: Mapped[int] = mapped_column(sa.Integer)
    try_number: Mapped[int] = mapped_column(sa.Integer)
    poke_count: Mapped[int] = mapped_column(sa.Integer)
    first_poke_at: Mapped[datetime]
    next_poke_at: Mapped[datetime]


class Pool(Base):
    """A named slot limit shared by every worker (migration 0023)."""

    __tablename__ = "pools"

    name: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    slots: Mapped[int] = mapped_column(sa.Integer)
    description: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    updated_at: Mapped[datetime]


class PoolSlot(Base):
    """A pooled task run's hold on its pool's slots (``used``: counts while its task run is
    running under ``lease_token``) or its wait for them (``queued``), migration 0023."""

    __tablename__ = "pool_slots"
    __table_args__ = (sa.Index(None, "pool", "state"), sa.Index(None, "dag_id", "run_id"))

    dedupe_key: Mapped[str] = mapped_column(sa.String(1000), primary_key=True)
    pool: Mapped[str] = mapped_column(sa.String(250))
    slots: Mapped[int] = mapped_column(sa.Integer)
    state: Mapped[str] = mapped_column(sa.String(20))
    lease_token: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    dag_id: Mapped[str] = mapped_column(sa.String(250))
    run_id: Mapped[str] = mapped_column(sa.String(250))
    task_id: Mapped[str] = mapped_column(sa.String(250))
    map_index: Mapped[int] = mapped_column(sa.Integer)
    since: Mapped[datetime]
    seen_at: Mapped[datetime]


class Backfill(Base):
    """One backfill (migration 0024): its range, its plan of runs to create or re-run, and how
    many of them it has released under its own max_active_runs."""

    __tablename__ = "backfills"
    __table_args__ = (sa.Index(None, "dag_id", "id"), sa.Index(None, "state"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(sa.String(250))
    state: Mapped[str] = mapped_column(sa.String(20))
    start: Mapped[datetime]
    end: Mapped[datetime]
    reprocess: Mapped[str] = mapped_column(sa.String(20))
    max_active_runs: Mapped[int] = mapped_column(sa.Integer)
    conf: Mapped[dict[str, Any]] = mapped_column(Json)
    plan: Mapped[list[dict[str, Any]]] = mapped_column(Json)
    released: Mapped[int] = mapped_column(sa.Integer, server_default="0")
    actor: Mapped[str] = mapped_column(sa.String(250))
    reason: Mapped[str] = mapped_column(sa.Text)
    created_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]


dag_runs: sa.Table = DagRun.__table__  # type: ignore[assignment]
task_runs: sa.Table = TaskRun.__table__  # type: ignore[assignment]
dead_letters: sa.Table = DeadLetter.__table__  # type: ignore[assignment]
dag_run_counts: sa.Table = DagRunCount.__table__  # type: ignore[assignment]
dag_states: sa.Table = DagState.__table__  # type: ignore[assignment]
audit_events: sa.Table = AuditEvent.__table__  # type: ignore[assignment]
beat_terms: sa.Table = BeatTerm.__table__  # type: ignore[assignment]
task_logs: sa.Table = TaskLog.__table__  # type: ignore[assignment]
map_items: sa.Table = MapItem.__table__  # type: ignore[assignment]
map_fan_ins: sa.Table = MapFanIn.__table__  # type: ignore[assignment]
notifications: sa.Table = Notification.__table__  # type: ignore[assignment]
sensor_pokes: sa.Table = SensorPoke.__table__  # type: ignore[assignment]
pools: sa.Table = Pool.__table__  # type: ignore[assignment]
pool_slots: sa.Table = PoolSlot.__table__  # type: ignore[assignment]
backfills: sa.Table = Backfill.__table__  # type: ignore[assignment]
