"""Airflow's ``DAG(...)`` / ``@dag`` on beatflow's DAG, and the edge helpers (``chain``,
``cross_downstream``, ``Label``). Airflow's arguments are mapped, a feature beatflow lacks is
refused with its name."""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from beatflow.compat.airflow import groups as airflow_groups
from beatflow.compat.airflow.finder import unsupported
from beatflow.dag import assets, authoring
from beatflow.dag.model import Ref
from beatflow.errors import DagDefinitionError

if TYPE_CHECKING:
    from beatflow.compat.airflow.operators import BaseOperator

current_dag: contextvars.ContextVar[DAG | None] = contextvars.ContextVar(
    "beatflow_airflow_dag", default=None
)
# DAGs made since the loader's import context opened: finalized when it closes (a DAG built
# without ``with`` gets its operators through ``dag=`` and has no block end to finalize it)
opened: list[DAG] = []

_ACCEPTED_AND_IGNORED = {
    "doc_md",
    "dag_display_name",
    "owner_links",
    "access_control",
    "default_view",
    "orientation",
    "max_active_tasks",
    "concurrency",
    "max_consecutive_failed_dag_runs",
    "auto_register",
    "fail_fast",
    "template_searchpath",
    "jinja_environment_kwargs",
    "is_paused_upon_creation",
    "deadline",
    "on_success_callback",  # passed on: DAG callbacks
    "on_failure_callback",
}
_NOT_SUPPORTED = {
    "sla_miss_callback": "SLA miss callbacks",
    "user_defined_macros": "user_defined_macros",
    "user_defined_filters": "user_defined_filters",
    "render_template_as_native_obj": "render_template_as_native_obj",
    "timetable": "custom timetables",
}


def caller() -> tuple[str | None, int | None]:
    """File and line of the first frame outside beatflow: where the DAG file wrote the call."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("beatflow."):
        frame = frame.f_back  # type: ignore[assignment]
    return (None, None) if frame is None else (frame.f_code.co_filename, frame.f_lineno)


def _schedule(value: Any) -> Any:
    """Airflow's ``schedule`` as beatflow's: a cron, preset, timedelta or None; an Asset, an
    asset condition (``a & b``, ``a | b``) or a list of assets (all of them) as the native
    asset schedule (``beatflow.dag.assets``)."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        if value == "@continuous":
            raise unsupported("schedule '@continuous'")
        return value
    if isinstance(value, assets.Asset | assets.AssetAll | assets.AssetAny):
        return value
    if isinstance(value, Iterable):
        items = list(value)
        if all(isinstance(v, assets.Asset | assets.AssetAll | assets.AssetAny) for v in items):
            return items
        raise unsupported("schedule on asset aliases or mixed lists", "assets")
    raise unsupported(f"schedule {type(value).__name__}", "custom timetables")


def _zone_of(start: datetime | None) -> str:
    tz = None if start is None else start.tzinfo
    name = getattr(tz, "key", None) or getattr(tz, "name", None)
    return name if isinstance(name, str) and name else "UTC"


class DAG(authoring.DAG):
    """``airflow.DAG`` (2.x and 3.x): ``with DAG("id", schedule="@daily", ...)``."""

    def __init__(
        self,
        dag_id: str,
        description: str | None = None,
        schedule: Any = None,
        start_date: datetime | None = None,
        end_date: datetime | None = None,
        default_args: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        catchup: bool = False,
        max_active_runs: int = 16,
        dagrun_timeout: timedelta | None = None,
        **kwargs: Any,
    ) -> None:
        if "schedule_interval" in kwargs:
            schedule = kwargs.pop("schedule_interval")
        for key in kwargs:
            if key in _NOT_SUPPORTED:
                if kwargs[key] is not None:
                    raise unsupported(f"DAG({key}=...)", _NOT_SUPPORTED[key])
            elif key not in _ACCEPTED_AND_IGNORED:
                raise unsupported(f"DAG({key}=...)")
        self.airflow_defaults = dict(default_args or {})
        start = start_date or self.airflow_defaults.get("start_date")
        declared = dict(params or {})  # values or Params (airflow Param is beatflow's)
        self.doc_md = kwargs.get("doc_md")
        super().__init__(
            dag_id,
            schedule=_schedule(schedule),
            start_date=start,
            end_date=end_date,
            timezone=_zone_of(start),
            catchup=catchup,
            max_active_runs=max_active_runs,
            tags=tuple(tags or ()),
            dagrun_timeout=dagrun_timeout,
            params=declared,
            description=description or "",
            on_success_callback=airflow_groups.callbacks(kwargs.get("on_success_callback")),
            on_failure_callback=airflow_groups.callbacks(kwargs.get("on_failure_callback")),
        )
        self.model.open_conf = True  # dag_run.conf is free-form; params are checked
        self.operators: dict[str, BaseOperator] = {}
        self.finalized = False
        opened.append(self)

    @property
    def params(self) -> dict[str, Any]:
        return {k: p.default for k, p in self.model.params.items()}

    @property
    def tasks(self) -> list[BaseOperator]:
        return list(self.operators.values())

    @property
    def task_ids(self) -> list[str]:
        return list(self.operators)

    def get_task(self, task_id: str) -> BaseOperator:
        return self.operators[task_id]

    def __enter__(self) -> DAG:
        super().__enter__()
        self._airflow_token = current_dag.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        current_dag.reset(self._airflow_token)
        super().__exit__(*exc)
        if exc[0] is None:
            self.finalize()

    def finalize(self) -> None:
        """Edges from XComArg inputs, then each task's ``upstream`` input: its direct upstream
        tasks' results (what ``xcom_pull`` and templates may read). Only direct upstream: an
        ancestor further up would be an edge the graph does not have, and a barrier in the
        canvas."""
        for op in self.operators.values():
            for up in op.xcom_inputs():
                op.spec.order_upstream.add(up)
        specs = self.model.tasks
        for op in self.operators.values():
            direct = sorted(t for t in op.spec.order_upstream if t in specs)
            op.spec.kwargs = {"upstream": {t: Ref(t) for t in direct}}
        self.finalized = True

    def test(self, **kwargs: Any) -> None:
        """``dag.test()`` in an ``if __name__ == "__main__"`` block: not run by the loader."""
        raise unsupported("DAG.test()", "run it with `beatflow dags trigger`")


def finalize_opened() -> None:
    """Finalize every DAG made since the import context opened (the loader's module exec)."""
    while opened:
        dag = opened.pop()
        if not dag.finalized:
            dag.finalize()


def dag(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """``@dag`` / ``@dag(schedule=..., ...)``: calling the function builds the DAG."""

    def wrap(f: Callable[..., Any]) -> Callable[..., DAG]:
        @functools.wraps(f)
        def factory(*args: Any, **kwargs: Any) -> DAG:
            opts = dict(options)
            dag_id = opts.pop("dag_id", None) or f.__name__
            if not opts.get("description") and f.__doc__:
                opts["description"] = f.__doc__.strip().splitlines()[0]
            with DAG(dag_id, **opts) as d:
                f(*args, **kwargs)
            return d

        return factory

    return wrap(fn) if fn is not None else wrap


def operators_of(value: Any, ends: str = "roots") -> list[BaseOperator]:
    """The operators a ``>>`` operand names: an operator, an XComArg, a task group (its
    ``roots`` or ``leaves``), or a list of them."""
    from beatflow.compat.airflow.operators import BaseOperator, XComArg

    if isinstance(value, BaseOperator):
        return [value]
    if isinstance(value, XComArg):
        return [value.operator]
    if isinstance(value, airflow_groups.TaskGroup):
        ids = value.roots() if ends == "roots" else value.leaves()
        return [value.airflow_dag.operators[t] for t in ids]
    if isinstance(value, list | tuple | set):
        return [op for v in value for op in operators_of(v, ends)]
    raise DagDefinitionError(f"cannot make a dependency with {type(value).__name__} {value!r:.60}")


def link(upstream: Any, downstream: Any) -> None:
    if isinstance(downstream, Label):
        downstream.upstream.append(upstream)
        return
    for down in operators_of(downstream, "roots"):
        for up in operators_of(upstream, "leaves"):
            down.spec.order_upstream.add(up.task_id)


def chain(*tasks: Any) -> None:
    """``chain(a, [b, c], d)``: each element upstream of the next; two lists of the same length
    are linked pairwise."""
    for left, right in zip(tasks, tasks[1:], strict=False):
        if isinstance(left, list | tuple) and isinstance(right, list | tuple):
            if len(left) != len(right):
                raise DagDefinitionError(
                    f"chain(): lists of different lengths ({len(left)} and {len(right)})"
                )
            for a, b in zip(left, right, strict=True):
                link(a, b)
        else:
            link(left, right)


def cross_downstream(from_tasks: Any, to_tasks: Any) -> None:
    link(list(from_tasks), list(to_tasks))


class Label:
    """``a >> Label("why") >> b``: the edge a >> b (the label is not shown)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.upstream: list[Any] = []

    def __rrshift__(self, other: Any) -> Label:
        self.upstream.append(other)
        return self

    def __rshift__(self, other: Any) -> Any:
        for up in self.upstream:
            link(up, other)
        return other

    def __lshift__(self, other: Any) -> Any:
        raise unsupported("Label with <<")
