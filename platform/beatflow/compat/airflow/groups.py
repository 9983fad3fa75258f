"""Airflow's ``TaskGroup`` / ``@task_group``, ``Param`` and ``on_*_callback`` on beatflow's
native ones: a group prefixes the ids of the operators made inside it (``extract.load``) and
stands for its roots and leaves in ``>>``; a ``Param`` is a native ``beatflow.Param``; a callback
is called with an Airflow-shaped context (``ti``, ``task_instance``, ``dag_run``, ``exception``)."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from typing import Any

from beatflow.compat.airflow.finder import unsupported
from beatflow.dag import groups, params

_GROUP_IGNORED = {"ui_color", "ui_fgcolor", "add_suffix_on_collision", "group_display_name"}
# JSON-Schema keywords with a field of their own in a native Param; the rest go to its keywords,
# but for these, shown in Airflow's form only
_PARAM_FIELDS = {"type", "enum", "minimum", "maximum", "pattern", "format", "title", "description"}
_PARAM_SHOWN = {"examples", "values_display", "section", "description_md"}
_NOTSET = object()  # Airflow's NOTSET: a Param written without a default


class TaskGroup(groups.TaskGroup):
    """``airflow.utils.task_group.TaskGroup``: ``with TaskGroup("extract") as g:``. Its
    ``default_args`` (Airflow's names) are merged over the DAG's for the operators inside."""

    def __init__(
        self,
        group_id: str,
        prefix_group_id: bool = True,
        parent_group: Any = None,
        dag: Any = None,
        default_args: Mapping[str, Any] | None = None,
        tooltip: str = "",
        **kwargs: Any,
    ) -> None:
        for key in kwargs:
            if key not in _GROUP_IGNORED:
                raise unsupported(f"TaskGroup({key}=...)")
        if not prefix_group_id:
            raise unsupported("TaskGroup(prefix_group_id=False)")
        if parent_group is not None or dag is not None:
            raise unsupported("TaskGroup(parent_group=/dag=)", "open the group inside the DAG")
        from beatflow.compat.airflow.dag import current_dag

        super().__init__(group_id, tooltip=tooltip or "")
        self.airflow_dag: Any = current_dag.get()  # the compat DAG: its operators by id
        outer = self.parent
        self.airflow_defaults: dict[str, Any] = {
            **(getattr(outer, "airflow_defaults", None) or {}),
            **dict(default_args or {}),
        }

    def __rshift__(self, other: Any) -> Any:
        from beatflow.compat.airflow.dag import link

        link(self, other)
        return other

    def __rrshift__(self, other: Any) -> TaskGroup:
        from beatflow.compat.airflow.dag import link

        link(other, self)
        return self

    def __lshift__(self, other: Any) -> Any:
        from beatflow.compat.airflow.dag import link

        link(other, self)
        return other

    def __rlshift__(self, other: Any) -> TaskGroup:
        from beatflow.compat.airflow.dag import link

        link(self, other)
        return self


def open_group(owner: Any) -> TaskGroup | None:
    """The Airflow group open in ``owner`` (a compat DAG) where an operator is being made."""
    group = groups.current(owner.model)
    return group if isinstance(group, TaskGroup) else None


def task_group(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """``@task_group`` / ``@task_group(group_id=..., default_args=..., tooltip=...)``: calling the
    function makes its operators inside a group; returns what it returns, or the group."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def call(*args: Any, **kwargs: Any) -> Any:
            from beatflow.compat.airflow.dag import current_dag

            owner = current_dag.get()
            if owner is None:
                return f(*args, **kwargs)
            opts = dict(options)
            gid = opts.pop("group_id", None) or f.__name__
            parent = groups.current(owner.model)
            base, n = gid, 1
            while groups.qualify(parent, gid) in owner.model.groups:  # called again
                gid, n = f"{base}__{n}", n + 1
            doc = (f.__doc__ or "").strip().splitlines()
            opts.setdefault("tooltip", doc[0] if doc else "")
            with TaskGroup(gid, **opts) as group:
                result = f(*args, **kwargs)
            return group if result is None else result

        def expand(**mapped: Any) -> Any:
            from beatflow.compat.airflow import mapped_groups

            return mapped_groups.expand(call, {}, mapped)

        def partial(**fixed: Any) -> Any:
            from beatflow.compat.airflow import mapped_groups

            return types.SimpleNamespace(
                expand=lambda **mapped: mapped_groups.expand(call, fixed, mapped)
            )

        def override(**more: Any) -> Callable[..., Any]:
            made: Callable[..., Any] = task_group(f, **{**options, **more})
            return made

        call.expand = expand  # type: ignore[attr-defined]
        call.partial = partial  # type: ignore[attr-defined]
        call.override = override  # type: ignore[attr-defined]
        return call

    return wrap(fn) if fn is not None else wrap


def Param(default: Any = _NOTSET, description: str | None = None, **schema: Any) -> params.Param:
    """``airflow.sdk.Param(default, type=..., enum=..., format=..., minLength=..., ...)`` as a
    native Param: every JSON-Schema keyword is checked (``format`` and the keywords beatflow has
    no field for by jsonschema, as Airflow checks them); without a default, a value is required."""
    kind = schema.get("type")
    keywords = {k: v for k, v in schema.items() if k not in _PARAM_FIELDS | _PARAM_SHOWN}
    return params.Param(
        default=None if default is _NOTSET else default,
        required=default is _NOTSET,
        type=tuple(kind) if isinstance(kind, list) else kind,
        description=description or schema.get("description") or "",
        title=schema.get("title") or "",
        enum=schema.get("enum"),
        minimum=schema.get("minimum"),
        maximum=schema.get("maximum"),
        pattern=schema.get("pattern"),
        format=schema.get("format"),
        keywords=keywords or None,
    )


def param_value(value: Any) -> Any:
    """A ``params={}`` value of an operator: a Param's default, else the value."""
    return value.default if isinstance(value, params.Param) else value


def callbacks(value: Any) -> Any:
    """An Airflow ``on_*_callback`` value (a callable or a list) as callables that take beatflow's
    callback context and call the Airflow one with an Airflow-shaped context."""
    if value is None:
        return None
    items = list(value) if isinstance(value, list | tuple) else [value]
    for item in items:
        if not callable(item) or type(item).__name__.endswith("Notifier"):
            raise unsupported(f"callback {type(item).__name__}", "notifiers")
    return [_adapted(item) for item in items]


def _adapted(fn: Callable[..., Any]) -> Callable[[Mapping[str, Any]], Any]:
    @functools.wraps(fn)
    def call(context: Mapping[str, Any]) -> Any:
        return fn(airflow_context(context))

    return call


def airflow_context(context: Mapping[str, Any]) -> dict[str, Any]:
    """beatflow's callback context with Airflow's names over it."""
    run = types.SimpleNamespace(
        dag_id=context["dag_id"],
        run_id=context["run_id"],
        state=context.get("state"),
        conf=dict(context.get("conf") or {}),
        logical_date=context.get("logical_date"),
    )
    ti = types.SimpleNamespace(
        dag_id=context["dag_id"],
        task_id=context.get("task_id"),
        run_id=context["run_id"],
        map_index=context.get("map_index", -1),
        try_number=context.get("try_number"),
        state=context.get("state"),
    )
    return {
        **context,
        "ti": ti,
        "task_instance": ti,
        "dag_run": run,
        "reason": context.get("reason"),
        "exception": context.get("exception"),
    }
