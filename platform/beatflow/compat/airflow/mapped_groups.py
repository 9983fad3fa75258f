"""``@task_group ... .expand(x=values)``: a mapped task group on beatflow's ``.map()``. The group
function is called once with a marker for each mapped argument; every task made in it that takes
the marker maps over the values (a small task returns them), and every task that takes the result
of a mapped task of the group maps over that task's results, index by index, as Airflow's mapped
group instances do. A task of the group with no mapped input, or with two, is refused."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from beatflow.compat.airflow import mapping
from beatflow.compat.airflow.finder import unsupported
from beatflow.compat.airflow.operators import BaseOperator, XComArg


class MappedArg:
    """What a mapped group's function gets for a mapped argument."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"MappedArg({self.name!r})"


def expand(call: Callable[..., Any], fixed: Mapping[str, Any], mapped: Mapping[str, Any]) -> Any:
    """Call the group function (``call`` opens the group) with markers, then map its tasks."""
    from beatflow.compat.airflow.dag import current_dag

    owner = current_dag.get()
    if owner is None:
        raise unsupported("@task_group .expand() outside a DAG")
    if len(mapped) != 1:
        raise unsupported(f"a task group expanded over {len(mapped)} arguments", "one only")
    ((name, values),) = mapped.items()
    before = set(owner.operators)
    result = call(**fixed, **{name: MappedArg(name)})
    made = [op for t, op in owner.operators.items() if t not in before]
    if not made:
        return result
    source = mapping.source_of(made[0], values)
    mapped_ids: set[str] = set()
    for op in made:  # made in order: a task's mapped upstream is mapped before it
        _map_one(op, source, mapped_ids)
        mapped_ids.add(op.task_id)
    return result


def _inputs(op: BaseOperator) -> dict[str, Any]:
    """The operator's function arguments by name (positional ones named by its signature)."""
    args = list(getattr(op, "op_args", ()) or ())
    kwargs = dict(getattr(op, "op_kwargs", {}) or {})
    if args:
        fn = getattr(op, "python_callable", None)
        names = list(inspect.signature(fn).parameters) if fn is not None else []
        if len(names) < len(args):
            raise unsupported("a task in a mapped task group with *args")
        kwargs.update(zip(names, args, strict=False))
        op.op_args = []  # type: ignore[attr-defined]
    return kwargs


def _map_one(op: BaseOperator, source: str, mapped_ids: set[str]) -> None:
    if getattr(op, "expand_into", None) != "op_kwargs":
        raise unsupported(f"{type(op).__name__} in a mapped task group", "@task functions only")
    kwargs = _inputs(op)
    found = [
        (k, v)
        for k, v in kwargs.items()
        if isinstance(v, MappedArg) or (isinstance(v, XComArg) and v.operator.task_id in mapped_ids)
    ]
    if len(found) != 1:
        raise unsupported(
            f'task "{op.task_id}" of a mapped task group with {len(found)} mapped inputs',
            "exactly one",
        )
    ((name, value),) = found
    kwargs[name] = None
    op.op_kwargs = kwargs  # type: ignore[attr-defined]
    op.expanded = name
    op.spec.map_over = source if isinstance(value, MappedArg) else value.operator.task_id
