"""The claim protocol's statements, built once per backend with bound parameters: they run on
every task run, and building SQLAlchemy constructs per call cost more than the round trips.

Lease times come from the database's clock on PostgreSQL (``now()``), so workers whose clocks
disagree still agree on when a lease expired. SQLite is embedded: every process using it runs
on its host, so the host clock (bound as a parameter) is the database's clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from beatflow.store.models import task_runs
from beatflow.store.records import (
    TASK_RUN_TERMINAL_STATES,
    TASK_RUN_WAITING_STATES,
    TASK_RUNNING,
    TASK_UP_FOR_RESCHEDULE,
)

t = task_runs.c
# columns a claim (re)sets: a fresh lease and a clean slate for the new try
LEASE_COLUMNS = (
    "state",
    "worker",
    "celery_task_id",
    "started_at",
    "ended_at",
    "result",
    "error",
    "traceback",
    "map_count",
    "deduped_from",
)


@dataclass(frozen=True, slots=True)
class ClaimStatements:
    insert: sa.Executable  # insert-or-conflict of a new running task run (try 1)
    # up_for_retry, cleared, or running with an expired lease -> next try; up_for_reschedule
    # (a sensor's next poke) -> the same try (a reschedule consumes no retry)
    take_over: sa.Executable
    current: sa.Executable  # the row, to report "done" or "held"
    renew: sa.Executable
    finish: sa.Executable
    fail: sa.Executable  # any unfinished row -> failed (a claimed row can always be failed)


def _lease_values() -> dict[str, sa.BindParameter[object]]:
    return {name: sa.bindparam(f"p_{name}") for name in LEASE_COLUMNS}


def lease_clock(now: datetime, lease_seconds: float) -> dict[str, Any]:
    """The lease-time parameters: PostgreSQL computes them with now() and p_lease_seconds,
    SQLite binds them (see the module docstring)."""
    return {
        "p_now": now,
        "p_lease_expires_at": now + timedelta(seconds=lease_seconds),
        "p_lease_seconds": lease_seconds,
    }


def fresh_lease(
    now: datetime,
    lease_seconds: float,
    token: str,
    *,
    worker: str | None,
    celery_task_id: str | None,
) -> dict[str, Any]:
    """The parameters of a claim's new lease: the clock and LEASE_COLUMNS for a new try."""
    return {
        **lease_clock(now, lease_seconds),
        "p_state": TASK_RUNNING,
        "p_worker": worker,
        "p_celery_task_id": celery_task_id,
        "p_lease_token": token,
        "p_started_at": now,
        "p_ended_at": None,
        "p_result": None,
        "p_error": None,
        "p_traceback": None,
        "p_map_count": None,
        "p_deduped_from": None,
    }


def build_claim_statements(
    insert_into: Callable[[sa.Table], Any],
    now: sa.ColumnElement[Any],
    expires: sa.ColumnElement[Any],
) -> ClaimStatements:
    """The claim protocol's statements with a backend's ``insert_into`` (one that has ON CONFLICT)
    and clock: ``now`` and ``expires`` (now + p_lease_seconds), the database's or bound (see
    the module docstring)."""
    insert = insert_into(task_runs)
    identity: dict[str, sa.BindParameter[object]] = {
        name: sa.bindparam(f"p_{name}")
        for name in ("dedupe_key", "dag_id", "run_id", "task_id", "map_index")
    }
    lease = {"lease_token": sa.bindparam("p_lease_token"), "lease_expires_at": expires}
    key = t.dedupe_key == sa.bindparam("p_key")
    holder = sa.and_(key, t.lease_token == sa.bindparam("p_token"), t.state == TASK_RUNNING)
    return ClaimStatements(
        insert=insert.values(**identity, try_number=1, **_lease_values(), **lease)
        .on_conflict_do_nothing(index_elements=["dedupe_key"])
        .returning(*task_runs.c),
        take_over=sa.update(task_runs)
        .where(
            key,
            sa.or_(
                t.state.in_(sorted(TASK_RUN_WAITING_STATES)),
                t.state == TASK_UP_FOR_RESCHEDULE,
                sa.and_(t.state == TASK_RUNNING, t.lease_expires_at < now),
            ),
        )
        .values(
            try_number=sa.case(
                (t.state == TASK_UP_FOR_RESCHEDULE, t.try_number), else_=t.try_number + 1
            ),
            **_lease_values(),
            **lease,
        )
        .returning(*task_runs.c),
        current=sa.select(task_runs).where(key),
        renew=sa.update(task_runs).where(holder).values(lease_expires_at=expires),
        finish=sa.update(task_runs)
        .where(holder)
        .values(
            state=sa.bindparam("p_state"),
            result=sa.bindparam("p_result"),
            error=sa.bindparam("p_error"),
            traceback=sa.bindparam("p_traceback"),
            ended_at=sa.bindparam("p_ended_at"),
            map_count=sa.bindparam("p_map_count"),
            lease_token=None,
            lease_expires_at=None,
        )
        .returning(t.dag_id, t.run_id, t.task_id, t.map_index),  # for its dead letter
        fail=sa.update(task_runs)
        .where(key, t.state.not_in(sorted(TASK_RUN_TERMINAL_STATES)))
        .values(
            state="failed",
            error=sa.bindparam("p_error"),
            traceback=sa.bindparam("p_traceback"),
            ended_at=sa.bindparam("p_ended_at"),
            lease_token=None,
            lease_expires_at=None,
        ),
    )
