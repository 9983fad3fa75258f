"""The node wrapper's reads (see ``hot``): the DAG run joined to exactly the task-run rows a task
needs, a .map() instance's own item of the list it maps over, and their parameters."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import sqlalchemy as sa

from beatflow.errors import StoreError
from beatflow.store.models import dag_runs, map_items, task_runs
from beatflow.store.records import TaskRunRecord

# A task with more upstream tasks than this reads every row of its run (one indexed range)
# rather than binding thousands of ids.
MAX_BOUND_UPSTREAM = 500


def task_columns(element: bool) -> list[sa.ColumnElement[Any]]:
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
def node_read(filtered: bool, by_key: bool = False, element: bool = False) -> sa.Select[Any]:
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
            *[c.label(f"t_{c.name}") for c in task_columns(element)],
        )
        .select_from(dag_runs.outerjoin(task_runs, join))
        .where(r.dag_id == sa.bindparam("p_dag_id"), r.run_id == sa.bindparam("p_run_id"))
        .order_by(t.started_at.asc().nulls_last(), t.task_id, t.map_index)
    )


# the element parameters when there is no element (PostgreSQL's one text always binds them)
NO_ELEMENT: dict[str, Any] = {
    "p_element_key": None,
    "p_element_index": 0,
    "p_item_task_id": None,
    "p_item_map_index": 0,
}
ELEMENT_PARAMS = tuple(NO_ELEMENT)


def element_params(element: tuple[str, int] | None, task_id: str, map_index: int) -> dict[str, Any]:
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


def with_item(record: TaskRunRecord, key: str, index: int) -> TaskRunRecord:
    if record.dedupe_key != key:
        return record
    whole = record.result
    item = whole[index] if isinstance(whole, list) and index < len(whole) else None
    return dataclasses.replace(record, result=item)


def is_own(record: TaskRunRecord, task_id: str, map_index: int) -> bool:
    return record.task_id == task_id and record.map_index == map_index
