"""The node wrapper's hot path in as few statements as it can take: one SELECT reads the DAG
run and exactly the task-run rows a task needs (its upstream's and its own), so a task run costs
one read, its claim and its finish. A mapped instance reads its own row and its upstream's,
never its siblings' (a 10,000-wide map would read 10^8 rows)."""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import Any, cast

import sqlalchemy as sa

from beatflow.store.base import StoreBase, dag_run_record, task_run_record
from beatflow.store.models import dag_runs, task_runs
from beatflow.store.records import DagRunRecord, TaskRunRecord

# A task with more upstream tasks than this reads every row of its run (one indexed range)
# rather than binding thousands of ids.
MAX_BOUND_UPSTREAM = 500


@functools.cache
def _node_read(filtered: bool, by_key: bool = False) -> sa.Select[Any]:
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
            *[c.label(f"t_{c.name}") for c in task_runs.c],
        )
        .select_from(dag_runs.outerjoin(task_runs, join))
        .where(r.dag_id == sa.bindparam("p_dag_id"), r.run_id == sa.bindparam("p_run_id"))
        .order_by(t.started_at.asc().nulls_last(), t.task_id, t.map_index)
    )


class HotPathMixin(StoreBase):
    def read_for_task(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int,
        upstream: Collection[str],
        *,
        keys: Collection[str] | None = None,
    ) -> tuple[DagRunRecord | None, list[TaskRunRecord]]:
        """The DAG run (None if there is none) and the task-run rows of ``upstream`` plus the
        task's own row (``task_id``/``map_index``; under any dedupe key), in one statement.
        When the caller knows every such row's dedupe key (``keys``: default keys, no mapped
        upstream) the rows are found through the unique key index: the database fetches those
        rows only, not every row of the run."""
        filtered = len(upstream) <= MAX_BOUND_UPSTREAM
        by_key = keys is not None and len(keys) <= MAX_BOUND_UPSTREAM
        params: dict[str, Any] = {"p_dag_id": dag_id, "p_run_id": run_id}
        if by_key:
            assert keys is not None
            params["p_keys"] = sorted(keys)
        elif filtered:
            params |= {"p_upstream": sorted(upstream), "p_task_id": task_id, "p_index": map_index}
        with self._read(f"reading task {task_id!r} of DAG run {dag_id}/{run_id}") as conn:
            rows = conn.execute(_node_read(filtered, by_key), params).mappings().all()
        if not rows:
            return None, []
        run = dag_run_record(_strip(rows[0], "r_"))
        tasks = [task_run_record(_strip(row, "t_")) for row in rows if row["t_dedupe_key"]]
        if by_key:
            tasks = [t for t in tasks if t.dag_id == dag_id and t.run_id == run_id]
        elif not filtered:
            tasks = [t for t in tasks if t.task_id in upstream or _is_own(t, task_id, map_index)]
        return run, tasks


def _is_own(record: TaskRunRecord, task_id: str, map_index: int) -> bool:
    return record.task_id == task_id and record.map_index == map_index


def _strip(row: sa.RowMapping, prefix: str) -> sa.RowMapping:
    return cast(
        sa.RowMapping, {k[len(prefix) :]: v for k, v in row.items() if k.startswith(prefix)}
    )
