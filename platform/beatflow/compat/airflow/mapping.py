"""Airflow's dynamic task mapping on beatflow's ``.map()``: ``.partial(**fixed)`` then
``.expand(x=values)`` (one mapped task run per element of a literal list or an upstream task's
result), ``.expand()`` over several arguments (their cross product, made at run time by a small
task that returns the dicts of arguments) and ``.expand_kwargs(dicts)``."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from beatflow.compat.airflow import running
from beatflow.compat.airflow.finder import unsupported
from beatflow.compat.airflow.operators import XComArg
from beatflow.dag.model import Ref, TaskSpec
from beatflow.errors import DagDefinitionError

if TYPE_CHECKING:
    from beatflow.compat.airflow.operators import BaseOperator


class Partial:
    """``Op.partial(**fixed)``: ``.expand(one=values)`` makes one mapped task."""

    def __init__(self, make: Callable[..., BaseOperator], fixed: Mapping[str, Any]) -> None:
        self.make = make
        self.fixed = dict(fixed)

    def expand(self, **mapped: Any) -> XComArg:
        if not mapped:
            raise DagDefinitionError("expand() needs at least one argument to map over")
        if len(mapped) > 1:  # the cross product of the lists, as Airflow maps them
            op = self.make(**self.fixed, **dict.fromkeys(mapped))
            op.expanded = KWARGS
            op.spec.map_over = _product_task(op, mapped)
            return XComArg(op)
        ((name, values),) = mapped.items()
        op = self.make(**self.fixed, **{name: None})
        op.expanded = name
        op.spec.map_over = source_of(op, values)
        return XComArg(op)

    def expand_kwargs(self, values: Any, *, strict: bool = True) -> XComArg:
        """``expand_kwargs([{"x": 1, "y": 2}, ...])`` or over a task's list of dicts: one
        mapped task run per dict, its keys the arguments."""
        if isinstance(values, list | tuple) and not all(isinstance(v, dict) for v in values):
            raise DagDefinitionError("expand_kwargs() takes a list of dicts")
        op = self.make(**self.fixed)
        op.expanded = KWARGS
        op.spec.map_over = source_of(op, values)
        return XComArg(op)


# ``op.expanded`` of a task mapped over dicts of arguments (several ones, expand_kwargs)
KWARGS = "__kwargs__"


def source_of(op: BaseOperator, values: Any) -> str:
    """The task whose result list a mapped operator maps over."""
    if isinstance(values, XComArg):
        if values.key != "return_value":
            raise unsupported('expand() over result["key"]')
        return values.operator.task_id
    if isinstance(values, list | tuple | dict):
        return _items_task(op, list(values) if not isinstance(values, dict) else [values])
    raise unsupported(f"expand() over {type(values).__name__}")


def _product(names: list[str], **lists: Any) -> list[dict[str, Any]]:
    """The cross product of the argument lists, as dicts (the first argument varies slowest)."""
    parts = [running.split(lists[n])[0] for n in names]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*parts)]


def _product_task(op: BaseOperator, mapped: Mapping[str, Any]) -> str:
    """A task that returns the dicts of arguments an ``expand()`` over several arguments maps
    over, from literal lists and upstream results."""
    task_id = f"{op.task_id}__items"
    kwargs: dict[str, Any] = {}
    for name, values in mapped.items():
        if isinstance(values, XComArg):
            if values.key != "return_value":
                raise unsupported('expand() over result["key"]')
            kwargs[name] = Ref(values.operator.task_id)
        elif isinstance(values, list | tuple):
            kwargs[name] = list(values)
        else:
            raise unsupported(f"expand() over {type(values).__name__}")
    op.dag.model.add_task(
        TaskSpec(
            task_id=task_id,
            fn=functools.partial(_product, list(mapped)),
            kwargs=kwargs,
            file=op.spec.file,
            line=op.spec.line,
        )
    )
    return task_id


def _items(values: list[Any]) -> list[Any]:
    return values


def _items_task(op: BaseOperator, values: list[Any]) -> str:
    """A task that returns the literal list an ``expand()`` maps over."""
    task_id = f"{op.task_id}__items"
    op.dag.model.add_task(
        TaskSpec(
            task_id=task_id,
            fn=functools.partial(_items, values),
            file=op.spec.file,
            line=op.spec.line,
        )
    )
    return task_id
