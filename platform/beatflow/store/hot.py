"""The node wrapper's hot path in as few statements as it can take: one SELECT reads the DAG
run and exactly the task-run rows a task needs (its upstream's and its own), so a task run costs
one read, its claim and its finish. A mapped instance reads its own row and its upstream's,
never its siblings' (a 10,000-wide map would read 10^8 rows).

In the common case the read and the claim are one statement (``read_and_claim``): when the rows
read make the claim certain (the run is active, every upstream row succeeded, the task has no
row yet), the same statement inserts the claim, so such a task run costs two statements in all:
this one and its finish.

A run's closing task that knows every task run of its run (and so the run's final state) writes
its own success and the run's end in one statement too (``finish_and_close``)."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from beatflow.errors import StoreError
from beatflow.store.base import (
    StoreBase,
    dag_run_record,
    task_run_record,
)
from beatflow.store.claim_sql import claim_statements, fresh_lease
from beatflow.store.dag_runs import _start_oldest, oldest_first, transition_statement
from beatflow.store.engine import UTCDateTime, dumps_json, utcnow
from beatflow.store.models import dag_runs, map_items, task_runs
from beatflow.store.records import (
    DAG_RUN_ACTIVE_STATES,
    DAG_RUN_FINISHED_STATES,
    INSERT_CHUNK,
    TASK_RUNNING,
    TASK_SUCCESS,
    Claim,
    DagRunRecord,
    FinishedRun,
    TaskRunRecord,
)

# A task with more upstream tasks than this reads every row of its run (one indexed range)
# rather than binding thousands of ids.
MAX_BOUND_UPSTREAM = 500


def _task_columns(element: bool) -> list[sa.ColumnElement[Any]]:
    """task_runs' columns; with ``element``, the row of ``p_element_key`` has as its result only
    the ``p_element_index``-th item of its result (None past its end): a .map() instance reads
    its own item of the list it maps over, not the whole list (O(1) bytes, not O(width)). The
    item comes from ``map_items`` (written when the task expanded: O(1) work), or, for a run
    expanded before those rows existed, from the source's result."""
    if not element:
        return list(task_runs.c)
    t, m = task_runs.c, map_items.c
    index = sa.bindparam("p_element_index", type_=sa.JSON.JSONIntIndexType())
    recorded = (
        sa.select(m.item)
        .where(
            m.dag_id == sa.bindparam("p_dag_id"),
            m.run_id == sa.bindparam("p_run_id"),
            m.task_id == sa.bindparam("p_item_task_id"),
            m.map_index == sa.bindparam("p_item_map_index"),
        )
        .scalar_subquery()
    )
    item = sa.case(
        (
            t.dedupe_key == sa.bindparam("p_element_key", type_=sa.String()),
            sa.func.coalesce(recorded, t.result[index]),
        ),
        else_=t.result,
    )
    return [sa.type_coerce(item, t.result.type).label("result") if c is t.result else c for c in t]


@functools.cache
def _node_read(filtered: bool, by_key: bool = False, element: bool = False) -> sa.Select[Any]:
    r, t = dag_runs.c, task_runs.c
    join = sa.and_(t.dag_id == r.dag_id, t.run_id == r.run_id)
    if by_key:
        # only the unique dedupe-key index applies (the run is checked on the rows read): one
        # probe per row whatever the run's size, even before the planner has statistics
        join = t.dedupe_key.in_(sa.bindparam("p_keys", expanding=True))
    elif filtered:
        join = sa.and_(
            join,
            sa.or_(
                t.task_id.in_(sa.bindparam("p_upstream", expanding=True)),
                sa.and_(
                    t.task_id == sa.bindparam("p_task_id"), t.map_index == sa.bindparam("p_index")
                ),
            ),
        )
    return (
        sa.select(
            *[c.label(f"r_{c.name}") for c in dag_runs.c],
            *[c.label(f"t_{c.name}") for c in _task_columns(element)],
        )
        .select_from(dag_runs.outerjoin(task_runs, join))
        .where(r.dag_id == sa.bindparam("p_dag_id"), r.run_id == sa.bindparam("p_run_id"))
        .order_by(t.started_at.asc().nulls_last(), t.task_id, t.map_index)
    )


@functools.cache
def _read_and_claim_pg() -> sa.TextClause:
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
def _finish_and_close() -> sa.TextClause:
    """The call with its typed result columns, built once."""
    return _FINISH_AND_CLOSE.columns(sa.column("kind", sa.String()), *dag_runs.c)  # type: ignore[return-value]


class HotPathMixin(StoreBase):
    def finish_and_close(
        self,
        dedupe_key: str,
        token: str,
        *,
        result: Any,
        dag_id: str,
        run_id: str,
        run_state: str,
        max_active_runs: int,
    ) -> FinishedRun:
        """``finish_task_run(state='success')``; when it wrote, the DAG run's end in
        ``run_state`` (from queued or running); when that ended the run, the start of the DAG's
        oldest queued runs that now fit under ``max_active_runs``. One transaction, taken under
        the DAG's dispatch lock from its start (one round trip on PostgreSQL, migration 0010),
        so no queued run is missed (see the migration). The caller must know the run's final
        state: every other task run of it is final."""
        if run_state not in DAG_RUN_FINISHED_STATES:
            raise StoreError(f"cannot close DAG run {dag_id}/{run_id} as {run_state!r}")
        self.check_result(dedupe_key, result)
        now = utcnow()
        action = f"finishing task run {dedupe_key!r} and closing DAG run {dag_id}/{run_id}"
        if self.dialect == "postgresql":
            params = {
                "p_key": dedupe_key,
                "p_token": token,
                "p_result": None if result is None else dumps_json(result),
                "p_ended_at": now,
                "p_dag_id": dag_id,
                "p_run_id": run_id,
                "p_run_state": run_state,
                "p_max": max_active_runs,
            }
            rows = self._driver_rows(action, _finish_and_close, params)
            kinds = [r["kind"] for r in rows]
            if kinds == ["lost"]:
                return FinishedRun(False)
            closed = next((dag_run_record(r) for r in rows if r["kind"] == "closed"), None)
            started = [dag_run_record(r) for r in rows if r["kind"] == "started"]
            return FinishedRun(True, closed, tuple(oldest_first(started, utcnow())))
        finish = {
            "p_key": dedupe_key,
            "p_token": token,
            "p_state": TASK_SUCCESS,
            "p_result": result,
            "p_error": None,
            "p_traceback": None,
            "p_ended_at": now,
            "p_map_count": None,
        }
        close = transition_statement(dag_id, run_id, run_state, DAG_RUN_ACTIVE_STATES, now)
        with self._write(action) as conn:  # BEGIN IMMEDIATE: SQLite's write lock throughout
            if conn.execute(claim_statements(self.dialect).finish, finish).first() is None:
                return FinishedRun(False)
            row = conn.execute(close).mappings().first()
            if row is None:
                return FinishedRun(True)
            moved = conn.execute(_start_oldest(dag_id, max_active_runs, now)).mappings()
            started = [dag_run_record(m) for m in moved]
        return FinishedRun(True, dag_run_record(row), tuple(oldest_first(started, now)))

    def record_map_items(
        self, dag_id: str, run_id: str, task_id: str, items: Sequence[Any]
    ) -> None:
        """Write the items a .map() task expands into, one row per instance (``map_index`` =
        position), before its instances are sent: each instance then reads its own row. Again
        for the same task (a redelivered or cleared expansion) overwrites them, in one
        transaction of multi-row inserts of at most ``INSERT_CHUNK``."""
        rows = [
            {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": i, "item": item}
            for i, item in enumerate(items)
        ]
        insert = self._insert(map_items)
        upsert = insert.on_conflict_do_update(
            index_elements=["dag_id", "run_id", "task_id", "map_index"],
            set_={"item": insert.excluded.item},
        )
        action = f"recording the {len(rows)} items of task {task_id!r} of DAG run {dag_id}/{run_id}"
        with self._write(action, transaction=True) as conn:
            for start in range(0, len(rows), INSERT_CHUNK):
                conn.execute(upsert, rows[start : start + INSERT_CHUNK])

    def read_and_claim(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int,
        dedupe_key: str,
        upstream_keys: Sequence[str],
        *,
        also: Sequence[str] = (),
        element: tuple[str, int] | None = None,
        worker: str | None = None,
        celery_task_id: str | None = None,
    ) -> tuple[DagRunRecord | None, list[TaskRunRecord], Claim | None]:
        """``read_for_task`` by keys (``dedupe_key``, the task's own, and ``upstream_keys``),
        and in the same statement the claim of ``dedupe_key`` when the rows make it certain:
        the run is active, every upstream row is there and succeeded, and the task has no row
        yet. The claim is then ``run`` at try 1, exactly what ``claim_task_run`` would have
        given; otherwise it is None and nothing was written (decide and claim as usual). For a
        task whose trigger rule runs when all its upstream succeeded, with default keys.
        ``also``: more rows of the run to read (their states do not count for the claim).
        ``element`` (key, i): that row comes back with only the i-th item of its result as its
        result (None past the end), what a .map() instance reads of the list it maps over."""
        ready_keys = sorted(set(upstream_keys) - {dedupe_key})
        keys = sorted({dedupe_key, *upstream_keys, *also})
        now = utcnow()
        token = uuid.uuid4().hex
        params: dict[str, Any] = {
            "p_dag_id": dag_id,
            "p_run_id": run_id,
            "p_keys": keys,
            "p_dedupe_key": dedupe_key,
            "p_task_id": task_id,
            "p_map_index": map_index,
            "p_worker": worker,
            "p_celery_task_id": celery_task_id,
            "p_lease_token": token,
            "p_started_at": now,
            "p_ready_keys": ready_keys,
            "p_ready": len(ready_keys),
            "p_lease_seconds": self.lease_seconds,
            **_element_params(element, task_id, map_index),
        }
        action = f"reading and claiming task {task_id!r} of DAG run {dag_id}/{run_id}"
        rows: Sequence[Mapping[Any, Any]]
        if self.dialect == "postgresql":
            rows = self._driver_rows(action, _read_and_claim_pg, {**_NO_ELEMENT, **params})
        else:
            rows = self._read_and_claim_sqlite(action, params, now)
        if not rows:
            return None, [], None
        run = dag_run_record(rows[0], "r_")
        tasks, claim = [], None
        for row in rows:
            if not row["t_dedupe_key"]:
                continue
            record = task_run_record(row, "t_")
            if row["t_claimed"]:
                claim = Claim("run", record, token)
            elif record.dag_id == dag_id and record.run_id == run_id:
                tasks.append(record)
        return run, tasks, claim

    def _read_and_claim_sqlite(
        self, action: str, params: dict[str, Any], now: datetime
    ) -> list[sa.RowMapping]:
        """SQLite: the same in one write transaction (the read, then the insert if certain)."""
        with self._write(action) as conn:
            names = ("p_dag_id", "p_run_id", "p_keys", *_ELEMENT_PARAMS)
            read = {k: params[k] for k in names if k in params}
            statement = _node_read(False, True, "p_element_key" in params)
            rows = [
                {**row, "t_claimed": False}
                for row in conn.execute(statement, read).mappings().all()
            ]
            if not rows or rows[0]["r_state"] in DAG_RUN_FINISHED_STATES:
                return cast(list[sa.RowMapping], rows)
            own = params["p_dedupe_key"]
            found = {r["t_dedupe_key"]: r for r in rows if r["t_dedupe_key"]}
            wanted = set(params["p_ready_keys"])
            ready = [
                r
                for key, r in found.items()
                if key in wanted
                and r["t_state"] == TASK_SUCCESS
                and (r["t_dag_id"], r["t_run_id"]) == (params["p_dag_id"], params["p_run_id"])
            ]
            if own in found or len(ready) != params["p_ready"]:
                return cast(list[sa.RowMapping], rows)
            lease = {
                **{k: params[k] for k in ("p_dedupe_key", "p_dag_id", "p_run_id", "p_task_id")},
                "p_map_index": params["p_map_index"],
                **fresh_lease(
                    now,
                    self.lease_seconds,
                    params["p_lease_token"],
                    worker=params["p_worker"],
                    celery_task_id=params["p_celery_task_id"],
                ),
            }
            claimed = conn.execute(claim_statements(self.dialect).insert, lease).mappings().first()
            if claimed is None:
                return cast(list[sa.RowMapping], rows)
            run_part = {k: v for k, v in rows[0].items() if k.startswith("r_")}
            task_part = {f"t_{k}": v for k, v in claimed.items()}
            rows.append({**run_part, **task_part, "t_claimed": True})
            return cast(list[sa.RowMapping], rows)

    def read_for_task(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int,
        upstream: Collection[str],
        *,
        keys: Collection[str] | None = None,
        element: tuple[str, int] | None = None,
    ) -> tuple[DagRunRecord | None, list[TaskRunRecord]]:
        """The DAG run (None if there is none) and the task-run rows of ``upstream`` plus the
        task's own row (``task_id``/``map_index``; under any dedupe key), in one statement.
        When the caller knows every such row's dedupe key (``keys``: default keys, no mapped
        upstream) the rows are found through the unique key index: the database fetches those
        rows only, not every row of the run. ``element``: as for ``read_and_claim``."""
        filtered = len(upstream) <= MAX_BOUND_UPSTREAM
        by_key = keys is not None and len(keys) <= MAX_BOUND_UPSTREAM
        params: dict[str, Any] = {"p_dag_id": dag_id, "p_run_id": run_id}
        projecting = _element_params(element, task_id, map_index)
        if by_key:
            assert keys is not None
            params["p_keys"] = sorted(keys)
            params |= projecting
        elif filtered:
            params |= {"p_upstream": sorted(upstream), "p_task_id": task_id, "p_index": map_index}
        projected = by_key and element is not None
        with self._read(f"reading task {task_id!r} of DAG run {dag_id}/{run_id}") as conn:
            statement = _node_read(filtered, by_key, projected)
            rows = conn.execute(statement, params).mappings().all()
        if not rows:
            return None, []
        run = dag_run_record(rows[0], "r_")
        tasks = [task_run_record(row, "t_") for row in rows if row["t_dedupe_key"]]
        if by_key:
            tasks = [t for t in tasks if t.dag_id == dag_id and t.run_id == run_id]
        elif not filtered:
            tasks = [t for t in tasks if t.task_id in upstream or _is_own(t, task_id, map_index)]
        if element is not None and not projected:  # read whole: the same answer, taken here
            tasks = [_with_item(t, *element) for t in tasks]
        return run, tasks


# the element parameters when there is no element (PostgreSQL's one text always binds them)
_NO_ELEMENT: dict[str, Any] = {
    "p_element_key": None,
    "p_element_index": 0,
    "p_item_task_id": None,
    "p_item_map_index": 0,
}
_ELEMENT_PARAMS = tuple(_NO_ELEMENT)


def _element_params(
    element: tuple[str, int] | None, task_id: str, map_index: int
) -> dict[str, Any]:
    if element is None:
        return {}
    key, index = element
    if type(index) is not int or index < 0:
        raise StoreError(f"an element index must be an integer of 0 or more, got {index!r}")
    return {
        "p_element_key": key,
        "p_element_index": index,
        "p_item_task_id": task_id,
        "p_item_map_index": map_index,
    }


def _with_item(record: TaskRunRecord, key: str, index: int) -> TaskRunRecord:
    if record.dedupe_key != key:
        return record
    whole = record.result
    item = whole[index] if isinstance(whole, list) and index < len(whole) else None
    return dataclasses.replace(record, result=item)


def _is_own(record: TaskRunRecord, task_id: str, map_index: int) -> bool:
    return record.task_id == task_id and record.map_index == map_index
