"""Statements and values shared by the store's parts and its backends: a DAG run's key, the
checked values of a new run and their insert (the one place each is written), the queued ->
running dispatch of a DAG's oldest runs, a run's transition, and the order started runs are
sent in."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from beatflow.errors import StoreError
from beatflow.store.engine import UTCDateTime, dumps_json, require_aware
from beatflow.store.models import dag_run_counts, dag_runs, is_queued
from beatflow.store.records import (
    DAG_FAILED,
    DAG_QUEUED,
    DAG_RUN_FINISHED_STATES,
    DAG_RUNNING,
    TRIGGERS,
    DagRunRecord,
)
from beatflow.store.rows import dag_run_record

if TYPE_CHECKING:
    from beatflow.store.backends import Backend


def where_run(dag_id: str, run_id: str) -> sa.ColumnElement[bool]:
    """The row of DAG run ``dag_id``/``run_id`` in dag_runs (its unique key)."""
    return sa.and_(dag_runs.c.dag_id == dag_id, dag_runs.c.run_id == run_id)


def check_conf(conf: Any, what: str) -> dict[str, Any]:
    """``conf`` as a run's or a letter's conf: a JSON object (None: empty), else StoreError."""
    if conf is None:
        return {}
    if not isinstance(conf, dict):
        raise StoreError(f"{what} must be a JSON object (dict), got {type(conf).__name__}")
    try:
        dumps_json(conf)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{what} is not JSON-serialisable: {exc}") from exc
    return conf


def run_values(
    dag_id: str,
    run_id: str,
    *,
    logical_date: datetime | None,
    trigger: str,
    conf: dict[str, Any] | None,
    leader_epoch: int | None,
    now: datetime,
    failure_reason: str | None = None,
    followed: bool = False,
) -> dict[str, Any]:
    """The checked column values of a new DAG run (StoreError names a bad one): queued, or
    failed with ``failure_reason`` when it cannot run (a required param without a default)."""
    if trigger not in TRIGGERS:
        raise StoreError(
            f"unknown trigger {trigger!r} for DAG run {dag_id}/{run_id}; "
            f"expected one of {', '.join(sorted(TRIGGERS))}"
        )
    failed = failure_reason is not None
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "logical_date": (
            None if logical_date is None else require_aware(logical_date, "logical_date")
        ),
        "trigger": trigger,
        "conf": check_conf(conf, f"conf of DAG run {dag_id}/{run_id}"),
        "state": DAG_FAILED if failed else DAG_QUEUED,
        "queued_at": now,
        "started_at": now if failed else None,
        "ended_at": now if failed else None,
        "leader_epoch": leader_epoch,
        "failure_reason": failure_reason,
        "followed": followed,
    }


def oldest_first(runs: list[DagRunRecord], now: datetime) -> list[DagRunRecord]:
    """Started runs in the order they are sent: logical date (none: as of ``now``), run id."""
    return sorted(runs, key=lambda r: (r.logical_date is None, r.logical_date or now, r.run_id))


def transition_statement(
    dag_id: str,
    run_id: str,
    to: str,
    from_states: Collection[str],
    now: datetime,
    reason: str | None = None,
) -> sa.Executable:
    """The conditional UPDATE ... RETURNING that moves a run from one of ``from_states`` to
    ``to`` (see ``transition_dag_run``)."""
    values: dict[str, Any]
    if to in DAG_RUN_FINISHED_STATES:
        values = {
            "ended_at": now,
            "started_at": sa.func.coalesce(dag_runs.c.started_at, sa.literal(now, UTCDateTime())),
        }
        if reason is not None:
            values["failure_reason"] = reason
    else:
        values = {"ended_at": None, "failure_reason": None, "resume_count": 0, "resume_after": None}
    return (
        sa.update(dag_runs)
        .where(where_run(dag_id, run_id), dag_runs.c.state.in_(sorted(from_states)))
        .values(state=to, **values)
        .returning(*dag_runs.c)
    )


def start_oldest(dag_id: str, max_active_runs: int, now: datetime) -> sa.Executable:
    """queued -> running for the oldest queued runs that fit under ``max_active_runs`` running
    ones, returning them: the free slots (off the DAG's running count, one row), the LIMIT'ed
    select and the update in one statement (PostgreSQL runs the same in beatflow_start_queued)."""
    running = sa.func.coalesce(
        sa.select(dag_run_counts.c.running)
        .where(dag_run_counts.c.dag_id == dag_id)
        .scalar_subquery(),
        0,
    )
    slots = sa.literal(max_active_runs) - running
    oldest = (
        sa.select(dag_runs.c.id)
        .where(dag_runs.c.dag_id == dag_id, is_queued(dag_runs.c.state))
        .order_by(dag_runs.c.logical_date, dag_runs.c.id)
        .limit(sa.case((slots > 0, slots), else_=0))
    )
    return (
        sa.update(dag_runs)
        .where(dag_runs.c.id.in_(oldest), dag_runs.c.state == DAG_QUEUED)
        .values(
            state=DAG_RUNNING,
            started_at=sa.func.coalesce(dag_runs.c.started_at, sa.literal(now, UTCDateTime())),
        )
        .returning(*dag_runs.c)
    )


def insert_runs(
    conn: sa.Connection, backend: Backend, rows: Sequence[dict[str, Any]]
) -> list[tuple[DagRunRecord, bool]]:
    """Insert the new runs of ``rows`` (``run_values``, one per run), or find the runs that
    exist already, on ``conn``: ``(run, created)`` per row, in order (a run named twice is
    inserted once, created at most once). One multi-row insert, plus one indexed read of the
    runs that existed, if any."""
    by_key = {(v["dag_id"], v["run_id"]): v for v in rows}
    # many parameter sets to one statement: SQLAlchemy compiles it once (its cache) and
    # batches the sets into multi-row INSERTs itself ("insertmanyvalues"), where
    # .values(rows) compiled a new statement (a bind parameter per value) on every call
    insert = (
        backend.insert(dag_runs)
        .on_conflict_do_nothing(index_elements=["dag_id", "run_id"])
        .returning(*dag_runs.c)
    )
    inserted = conn.execute(insert, list(by_key.values())).mappings()
    made = {(r.dag_id, r.run_id): r for r in map(dag_run_record, inserted)}
    others = sorted(key for key in by_key if key not in made)
    found: dict[tuple[str, str], DagRunRecord] = {}
    if others:
        query = sa.select(dag_runs).where(backend.of_runs(dag_runs, others))
        existing = map(dag_run_record, conn.execute(query).mappings())
        found = {(r.dag_id, r.run_id): r for r in existing}
    out: list[tuple[DagRunRecord, bool]] = []
    seen: set[tuple[str, str]] = set()
    for v in rows:
        key = (v["dag_id"], v["run_id"])
        out.append((made[key], key not in seen) if key in made else (found[key], False))
        seen.add(key)
    return out
