"""PostgreSQL's hot statements, written out or built once: each one round trip (the functions
of migrations 0007, 0008, 0010, 0015 and 0018, whose bodies are in ``store/functions``; the
node wrapper's read-and-claim; a task run's finish, with its fan-in count for a .map()
instance). ``Postgres`` (backends/postgresql.py) runs them."""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from beatflow.store.claim_sql import ClaimStatements, build_claim_statements
from beatflow.store.engine import UTCDateTime
from beatflow.store.fan_in_sql import count_up
from beatflow.store.models import dag_runs, task_runs
from beatflow.store.records import DAG_RUN_FINISHED_STATES, TASK_RUNNING, TASK_SUCCESS

START_QUEUED = sa.text(
    "SELECT * FROM beatflow_start_queued(CAST(:d AS text), CAST(:m AS integer))"
).columns(*dag_runs.c)

START_QUEUED_MANY = sa.text(
    "SELECT * FROM beatflow_start_queued_many(CAST(:dag_ids AS text[]), CAST(:maxes AS integer[]))"
).columns(*dag_runs.c)

_CREATE_AND_START = sa.text(
    "SELECT f.is_new, f.is_started, (f.run).* FROM beatflow_create_and_start("
    "CAST(:dag_id AS text), CAST(:run_id AS text), :logical_date, CAST(:trigger AS text), "
    "CAST(:conf AS json), :queued_at, CAST(:leader_epoch AS bigint), CAST(:max AS integer), "
    "CAST(:followed AS boolean)) AS f"
).bindparams(
    sa.bindparam("logical_date", type_=UTCDateTime()),
    sa.bindparam("queued_at", type_=UTCDateTime()),
)
# the values of a new run the function takes (conf and max are added as the call needs them)
CREATE_AND_START_PARAMS = (
    "dag_id",
    "run_id",
    "logical_date",
    "trigger",
    "queued_at",
    "leader_epoch",
    "followed",
)


# the same call with the audit record of the operator who asked, in the same statement (one
# transaction, no second round trip): neither is written without the other
_CREATE_START_AND_AUDIT = sa.text(
    "WITH f AS MATERIALIZED ("
    f"{_CREATE_AND_START.text}"
    "), a AS (INSERT INTO audit_events (at, actor, action, dag_id, run_id, detail) VALUES ("
    ":audit_at, CAST(:audit_actor AS text), CAST(:audit_action AS text), CAST(:dag_id AS text), "
    "CAST(:run_id AS text), CAST(:audit_detail AS json))) SELECT * FROM f"
).bindparams(
    sa.bindparam("logical_date", type_=UTCDateTime()),
    sa.bindparam("queued_at", type_=UTCDateTime()),
    sa.bindparam("audit_at", type_=UTCDateTime()),
)


@functools.cache
def create_and_start() -> sa.TextClause:
    """The call with its typed result columns, built once (it runs on every trigger)."""
    columns = (sa.column("is_new", sa.Boolean()), sa.column("is_started", sa.Boolean()))
    return _CREATE_AND_START.columns(*columns, *dag_runs.c)  # type: ignore[return-value]


@functools.cache
def create_start_and_audit() -> sa.TextClause:
    """``create_and_start`` with an audit record written by the same statement."""
    columns = (sa.column("is_new", sa.Boolean()), sa.column("is_started", sa.Boolean()))
    return _CREATE_START_AND_AUDIT.columns(*columns, *dag_runs.c)  # type: ignore[return-value]


@functools.cache
def claims() -> ClaimStatements:
    """The claim protocol on the database's clock: now() and now() + p_lease_seconds."""
    now = sa.func.now(type_=UTCDateTime())
    seconds = sa.bindparam("p_lease_seconds", type_=sa.Float())
    expires = now + sa.func.make_interval(0, 0, 0, 0, 0, 0, seconds)
    return build_claim_statements(postgresql.insert, now, expires)


def finish() -> sa.Executable:
    """A task run's finish (``claims().finish``), for ``driver_statement``."""
    return claims().finish


def finish_counted() -> sa.Executable:
    """The finish of a .map() instance: the finish and its count in the fan-in (``count_up``)
    in one statement; the count's row, or NULLs without a fan-in."""
    update: Any = claims().finish  # an UPDATE ... RETURNING
    fin = update.cte("fin")
    fan = count_up(fin.c.dag_id, fin.c.run_id, fin.c.task_id, fin.c.map_index).cte("fan")
    return sa.select(fin.c.map_index, fan.c.final, fan.c.total, fan.c.canvas).select_from(
        fin.outerjoin(fan, sa.true())
    )


@functools.cache
def read_and_claim() -> sa.TextClause:
    """PostgreSQL: read the run and the rows of ``p_keys``, and insert the claim of
    ``p_dedupe_key`` (try 1, a fresh lease) when the run is active, all ``p_ready`` rows of
    ``p_ready_keys`` (the upstream's) are this run's and succeeded, and the own key has no row;
    one statement. The rows come back with ``t_claimed`` true for the inserted claim. The row of
    ``p_element_key`` (when not NULL) has only the ``p_element_index``-th item of its result.

    Written out, not built: one text whatever the number of keys (arrays, not IN lists), short
    enough for psycopg to cache its conversion (4 KB), and one prepared statement. The keys are
    read through ``p``, so no plan can count them: PostgreSQL then keeps one generic plan per
    connection instead of planning every call (0.85 ms, four times the execution)."""
    tasks = [c.name for c in task_runs.c]
    listed = ", ".join(
        "CASE WHEN t.dedupe_key = p.element_key THEN coalesce((SELECT m.item FROM map_items m"
        " WHERE m.dag_id = p.dag_id AND m.run_id = p.run_id AND m.task_id = p.item_task_id"
        " AND m.map_index = p.item_map_index), t.result -> p.element_index) ELSE t.result"
        " END AS result"
        if name == "result"
        else f"t.{name}"
        for name in tasks
    )
    finished = ", ".join(f"'{state}'" for state in sorted(DAG_RUN_FINISHED_STATES))
    out = ", ".join(
        [
            *(f"run.{c.name} AS r_{c.name}" for c in dag_runs.c),
            *(f"rows.{n} AS t_{n}" for n in tasks),
        ]
    )
    sql = f"""WITH p AS (SELECT CAST(:p_dag_id AS text) AS dag_id,
CAST(:p_run_id AS text) AS run_id, CAST(:p_dedupe_key AS text) AS own,
CAST(:p_element_key AS text) AS element_key,
CAST(:p_element_index AS integer) AS element_index, CAST(:p_item_task_id AS text) AS item_task_id,
CAST(:p_item_map_index AS integer) AS item_map_index, CAST(:p_keys AS text[]) AS keys),
run AS (SELECT d.* FROM dag_runs d, p WHERE d.dag_id = p.dag_id AND d.run_id = p.run_id),
up AS (SELECT {listed} FROM task_runs t, p WHERE t.dedupe_key = ANY(p.keys)),
claim AS (INSERT INTO task_runs (dedupe_key, dag_id, run_id, task_id, map_index, state,
try_number, worker, celery_task_id, lease_token, lease_expires_at, started_at)
SELECT p.own, p.dag_id, p.run_id, CAST(:p_task_id AS varchar(250)),
CAST(:p_map_index AS integer), '{TASK_RUNNING}', 1, CAST(:p_worker AS varchar(250)),
CAST(:p_celery_task_id AS varchar(250)), CAST(:p_lease_token AS varchar(64)),
now() + make_interval(secs => CAST(:p_lease_seconds AS float8)),
CAST(:p_started_at AS timestamptz) FROM p
WHERE EXISTS (SELECT 1 FROM run WHERE state NOT IN ({finished}))
AND (SELECT count(*) FROM up WHERE up.dedupe_key = ANY(CAST(:p_ready_keys AS text[]))
AND up.dag_id = p.dag_id AND up.run_id = p.run_id AND up.state = '{TASK_SUCCESS}')
= CAST(:p_ready AS integer)
AND NOT EXISTS (SELECT 1 FROM up WHERE up.dedupe_key = p.own)
ON CONFLICT (dedupe_key) DO NOTHING RETURNING *)
SELECT {out}, rows.claimed AS t_claimed FROM run LEFT JOIN
(SELECT up.*, false AS claimed FROM up UNION ALL SELECT {", ".join(tasks)}, true FROM claim) AS rows
ON true ORDER BY rows.started_at NULLS LAST, rows.task_id, rows.map_index"""
    text = sa.text(sql).bindparams(
        sa.bindparam("p_keys", type_=postgresql.ARRAY(sa.String())),
        sa.bindparam("p_ready_keys", type_=postgresql.ARRAY(sa.String())),
        sa.bindparam("p_started_at", type_=UTCDateTime()),
        sa.bindparam("p_element_key", type_=sa.String()),
        sa.bindparam("p_element_index", type_=sa.Integer()),
        sa.bindparam("p_item_task_id", type_=sa.String()),
        sa.bindparam("p_item_map_index", type_=sa.Integer()),
        sa.bindparam("p_map_index", type_=sa.Integer()),
        sa.bindparam("p_ready", type_=sa.Integer()),
        sa.bindparam("p_lease_seconds", type_=sa.Float()),
    )
    typed = [
        *(sa.column(f"r_{c.name}", c.type) for c in dag_runs.c),
        *(sa.column(f"t_{c.name}", c.type) for c in task_runs.c),
        sa.column("t_claimed", sa.Boolean()),
    ]
    return text.columns(*typed)  # type: ignore[return-value]


# one round trip on PostgreSQL (migration 0010): the lock, the finish, the close, the dispatch
_FINISH_AND_CLOSE = sa.text(
    "SELECT f.kind, (f.run).* FROM beatflow_finish_and_close("
    "CAST(:p_key AS text), CAST(:p_token AS text), CAST(:p_result AS json), :p_ended_at, "
    "CAST(:p_dag_id AS text), CAST(:p_run_id AS text), CAST(:p_run_state AS text), "
    "CAST(:p_max AS integer)) AS f"
).bindparams(sa.bindparam("p_ended_at", type_=UTCDateTime()))


@functools.cache
def finish_and_close() -> sa.TextClause:
    """The call with its typed result columns, built once."""
    return _FINISH_AND_CLOSE.columns(sa.column("kind", sa.String()), *dag_runs.c)  # type: ignore[return-value]
