"""The fan-in's statements (see ``fan_ins``): an instance counted as it ends, the canvas to
continue when the count reaches the total, and a recount of the instances already final."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from beatflow.store.models import map_fan_ins, task_runs
from beatflow.store.records import TASK_RUN_TERMINAL_STATES

f = map_fan_ins.c
t = task_runs.c


def count_up(dag_id: Any, run_id: Any, task_id: Any, map_index: Any) -> sa.Update:
    """One more instance of the expansion ended (a no-op without a fan-in, or for an index past
    its total): returns the new count, the total and the canvas."""
    return (
        sa.update(map_fan_ins)
        .where(
            f.dag_id == dag_id,
            f.run_id == run_id,
            f.task_id == task_id,
            f.total > map_index,
            map_index >= 0,
        )
        .values(final=f.final + 1)
        .returning(f.final, f.total, f.canvas)
    )


def completed(row: Any) -> dict[str, Any] | None:
    """The canvas to continue when this count made the fan-in reach its total."""
    if row is None or row["final"] is None or row["final"] != row["total"]:
        return None
    canvas: dict[str, Any] = row["canvas"] or {}
    return canvas


def ended_count(dag_id: str, run_id: str, task_id: str, total: int) -> sa.ScalarSelect[int]:
    """How many of an expansion's ``total`` instances have a final row."""
    return (
        sa.select(sa.func.count())
        .select_from(task_runs)
        .where(
            t.dag_id == dag_id,
            t.run_id == run_id,
            t.task_id == task_id,
            t.map_index >= 0,
            t.map_index < total,
            t.state.in_(sorted(TASK_RUN_TERMINAL_STATES)),
        )
        .scalar_subquery()
    )
