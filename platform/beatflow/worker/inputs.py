"""A task run's arguments from its upstream rows: each upstream's result (a .map() task's as the
list of its instances' results), resolved into the task's args and kwargs; a mapped instance's
own item first."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from beatflow.dag.model import DAG, Ref, TaskSpec, map_leaves
from beatflow.errors import NoSuchItemError
from beatflow.states import TaskRunState

if TYPE_CHECKING:
    from beatflow.store import TaskRunRecord


def upstream_results(dag: DAG, rows: Iterable[TaskRunRecord]) -> dict[str, Any]:
    """Each upstream task's result: its row's, or for a .map() task the list of its instances'
    results in map order (only ``map_count`` of them: the expansion is recorded out of band)."""
    own: dict[str, TaskRunRecord] = {}
    instances: dict[str, dict[int, Any]] = {}
    for t in rows:
        if t.map_index < 0:
            own[t.task_id] = t
        else:
            instances.setdefault(t.task_id, {})[t.map_index] = t.result
    results: dict[str, Any] = {}
    for task_id, row in own.items():
        up = dag.tasks.get(task_id)
        if up is not None and up.map_over and row.state == TaskRunState.SUCCESS:
            got = instances.get(task_id, {})
            results[task_id] = [got[i] for i in range(row.map_count or 0) if i in got]
        else:
            results[task_id] = row.result
    return results


def inputs(
    dag: DAG, spec: TaskSpec, index: int, rows: list[TaskRunRecord], *, item_only: bool = False
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of a task run from its upstream rows. ``item_only``: a mapped instance's
    read gave its own item as its source's result (``claim.map_item``), and the expander's row.
    NoSuchItemError when a mapped instance's index is past the end of its list."""
    results = upstream_results(dag, (t for t in rows if t.task_id != spec.task_id))

    def resolve(value: Any) -> Any:
        return map_leaves(value, lambda v: results.get(v.task_id) if isinstance(v, Ref) else v)

    args = tuple(resolve(a) for a in spec.args)
    kwargs = {k: resolve(v) for k, v in spec.kwargs.items()}
    if spec.map_over:
        if item_only:
            expander = next(
                (t for t in rows if t.task_id == spec.task_id and t.map_index < 0), None
            )
            count = None if expander is None else expander.map_count
            if count is None or index >= count:
                raise NoSuchItemError(_no_item(spec, index, count))
            return (results.get(spec.map_over), *args), kwargs
        items = results.get(spec.map_over) or []
        if index >= len(items):
            raise NoSuchItemError(_no_item(spec, index, len(items)))
        args = (items[index], *args)
    return args, kwargs


def _no_item(spec: TaskSpec, index: int, count: int | None) -> str:
    of = "an unexpanded list" if count is None else f"the {count} items"
    return f'map index {index} is past the end of {of} of "{spec.map_over}"'
