"""The authoring API that dags/*.py use: ``with DAG(...)``, ``@task``, ``a >> b``, ``.map()``,
``.override()``, and ``context()`` for the running task's ids."""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, overload
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from beatflow.dag import groups, model
from beatflow.dag.assets import asset_condition, is_asset_schedule, outlet_names
from beatflow.dag.model import Param, Ref, RetryPolicy, TaskSpec
from beatflow.dag.schedule import Schedule
from beatflow.dag.task_options import TASK_OPTIONS as _TASK_OPTIONS
from beatflow.dag.task_options import callbacks_of as _callbacks
from beatflow.dag.task_options import option_problems as _option_problems
from beatflow.dag.task_options import seconds as _seconds
from beatflow.errors import DagDefinitionError, InvalidIdError
from beatflow.ids import check_dag_id, check_task_id
from beatflow.times import as_utc

__all__ = ["DAG", "Param", "TaskRef", "context", "task"]

_current_dag: contextvars.ContextVar[model.DAG | None] = contextvars.ContextVar(
    "beatflow_current_dag", default=None
)
# The loader sets this to collect the DAGs a module defines; outside the loader, DAGs still work.
_collector: contextvars.ContextVar[list[model.DAG] | None] = contextvars.ContextVar(
    "beatflow_dag_collector", default=None
)
_context: contextvars.ContextVar[Any] = contextvars.ContextVar("beatflow_task_context")


def context() -> Any:
    """The running task's TaskContext (run id, logical date, dedupe key, params, logger...)."""
    try:
        return _context.get()
    except LookupError:
        raise RuntimeError("beatflow.context() is only available inside a running task") from None


def set_task_context(ctx: Any) -> contextvars.Token[Any]:
    """Make ``ctx`` what :func:`context` returns until :func:`reset_task_context` (the worker
    sets it around each task run); returns the token that resets it."""
    return _context.set(ctx)


def reset_task_context(token: contextvars.Token[Any]) -> None:
    """Undo the :func:`set_task_context` that returned ``token``."""
    _context.reset(token)


def _caller() -> tuple[str | None, int | None]:
    """File and line of the first frame outside beatflow: where the user wrote the call."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("beatflow."):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return None, None
    return frame.f_code.co_filename, frame.f_lineno


def _zone(name: str | ZoneInfo, file: str | None, line: int | None) -> ZoneInfo:
    if isinstance(name, ZoneInfo):
        return name
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise DagDefinitionError(
            f"unknown time zone {name!r}; use an IANA name such as 'Europe/Paris' or 'UTC'",
            file=file,
            line=line,
        ) from None


def _aware(value: datetime | None, tz: ZoneInfo) -> datetime | None:
    return None if value is None else as_utc(value, tz)


class DAG:
    """Declare a DAG: ``with DAG("etl", schedule="0 * * * *", start_date=...) as dag: ...``."""

    def __init__(
        self,
        dag_id: str,
        *,
        schedule: Any = None,  # cron, preset, timedelta, None, or assets (dag.assets)
        start_date: datetime | None = None,
        end_date: datetime | None = None,
        timezone: str | ZoneInfo = "UTC",
        catchup: bool = False,
        max_active_runs: int = 16,
        default_args: Mapping[str, Any] | None = None,
        tags: Iterable[str] = (),
        sla: timedelta | None = None,
        dagrun_timeout: timedelta | None = None,
        params: Mapping[str, Any] | None = None,
        description: str = "",
        on_failure: Callable[..., Any] | None = None,
        on_sla_miss: Callable[..., Any] | None = None,
        on_success_callback: Any = None,
        on_failure_callback: Any = None,
    ) -> None:
        file, line = _caller()
        try:
            check_dag_id(dag_id)
        except InvalidIdError as exc:
            raise DagDefinitionError(str(exc), file=file, line=line) from None
        tz = _zone(timezone, file, line)
        start = _aware(start_date, tz)
        sched: Schedule | None = None
        on_assets = None
        if is_asset_schedule(schedule):
            try:
                on_assets = asset_condition(schedule)
            except ValueError as exc:
                raise DagDefinitionError(f'DAG "{dag_id}": {exc}', file=file, line=line) from None
        elif schedule is not None:
            try:
                sched = Schedule.parse(schedule, tz, anchor=start)
            except ValueError as exc:
                raise DagDefinitionError(f'DAG "{dag_id}": {exc}', file=file, line=line) from None
        if dagrun_timeout is not None and (
            not isinstance(dagrun_timeout, timedelta) or dagrun_timeout <= timedelta(0)
        ):
            raise DagDefinitionError(
                f'DAG "{dag_id}": dagrun_timeout must be a positive timedelta, '
                f"got {dagrun_timeout!r}",
                file=file,
                line=line,
            )
        if max_active_runs < 1:
            raise DagDefinitionError(
                f'DAG "{dag_id}": max_active_runs must be at least 1', file=file, line=line
            )
        self.defaults = dict(default_args or {})
        unknown = set(self.defaults) - _TASK_OPTIONS
        if unknown:
            raise DagDefinitionError(
                f'DAG "{dag_id}": unknown default_args {sorted(unknown)}; '
                f"known: {sorted(_TASK_OPTIONS)}",
                file=file,
                line=line,
            )
        callbacks = _callbacks(
            {"on_success_callback": on_success_callback, "on_failure_callback": on_failure_callback}
        )
        if isinstance(callbacks, str):
            raise DagDefinitionError(f'DAG "{dag_id}": {callbacks}', file=file, line=line)
        self.model = model.DAG(
            dag_id=dag_id,
            schedule=sched,
            start_date=start,
            end_date=_aware(end_date, tz),
            timezone=tz,
            catchup=catchup,
            max_active_runs=max_active_runs,
            tags=tuple(tags),
            sla=sla,
            dagrun_timeout=dagrun_timeout,
            params={k: model.param_from(v) for k, v in (params or {}).items()},
            description=description,
            on_failure=on_failure,
            on_sla_miss=on_sla_miss,
            callbacks=callbacks,
            file=file,
            line=line,
            defaults=self.defaults,
            asset_schedule=on_assets,
        )
        self._token: contextvars.Token[model.DAG | None] | None = None
        collector = _collector.get()
        if collector is not None:
            collector.append(self.model)

    @property
    def dag_id(self) -> str:
        return self.model.dag_id

    def __enter__(self) -> DAG:
        self._token = _current_dag.set(self.model)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _current_dag.reset(self._token)
            self._token = None


@dataclass(frozen=True, slots=True)
class TaskRef:
    """What calling a task inside a DAG returns: its future result, and an edge handle."""

    dag: model.DAG
    task_id: str

    # the other side may also be a task group (its roots or leaves) or a list (dag/groups.py)
    def __rshift__(self, other: Any) -> Any:
        groups.link(self.dag, [self.task_id], groups.heads(other))
        return other

    def __rrshift__(self, other: Any) -> TaskRef:
        groups.link(self.dag, groups.tails(other), [self.task_id])
        return self

    def __lshift__(self, other: Any) -> Any:
        groups.link(self.dag, groups.tails(other), [self.task_id])
        return other

    def __rlshift__(self, other: Any) -> TaskRef:
        groups.link(self.dag, [self.task_id], groups.heads(other))
        return self


class Task:
    """A decorated function. Inside a DAG block a call adds a task; outside it runs the function."""

    def __init__(self, fn: Callable[..., Any], options: Mapping[str, Any]) -> None:
        unknown = set(options) - _TASK_OPTIONS - {"task_id"}
        if unknown:
            file, line = _caller()
            raise DagDefinitionError(
                f"unknown @task options {sorted(unknown)}; known: {sorted(_TASK_OPTIONS)}",
                file=file,
                line=line,
            )
        if options.get("trigger_rule", "all_success") not in model.TRIGGER_RULES:
            file, line = _caller()
            raise DagDefinitionError(
                f"unknown trigger_rule {options['trigger_rule']!r}; "
                f"known: {', '.join(model.TRIGGER_RULES)}",
                file=file,
                line=line,
            )
        self.fn = fn
        self.options = dict(options)
        functools.update_wrapper(self, fn)

    def override(self, **options: Any) -> Task:
        """The same function with other options, e.g. ``extract.override(task_id="extract_eu")``."""
        return Task(self.fn, {**self.options, **options})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        dag = _current_dag.get()
        if dag is None:
            return self.fn(*args, **kwargs)
        return self._add(dag, args, kwargs, map_over=None)

    def map(self, over: TaskRef, *args: Any, **kwargs: Any) -> TaskRef:
        """Fan out over ``over``'s result (a list known at run time): one task run per element,
        passed as the first argument; a downstream task receives the list of results."""
        dag = _current_dag.get()
        if dag is None:
            return [self.fn(x, *args, **kwargs) for x in over]  # type: ignore[return-value,attr-defined]
        if not isinstance(over, TaskRef):
            file, line = _caller()
            raise DagDefinitionError(
                f"{self.fn.__name__}.map() takes the result of another task (a list at run time), "
                f"got {type(over).__name__}",
                file=file,
                line=line,
            )
        return self._add(dag, args, kwargs, map_over=over.task_id)

    def _add(
        self, dag: model.DAG, args: tuple[Any, ...], kwargs: dict[str, Any], map_over: str | None
    ) -> TaskRef:
        file, line = _caller()
        opts = {**groups.task_defaults(dag), **self.options}
        group = groups.current(dag)  # a group prefixes the id: extract.load
        task_id = groups.qualify(group, opts["task_id"]) if opts.get("task_id") else None
        task_id = task_id or self._free_id(dag, groups.qualify(group, self.fn.__name__))
        try:
            check_task_id(task_id)
        except InvalidIdError as exc:
            raise DagDefinitionError(f'DAG "{dag.dag_id}": {exc}', file=file, line=line) from None
        problems = _option_problems(opts)
        callbacks = _callbacks(opts)
        if isinstance(callbacks, str):
            problems.append(callbacks)
        if problems:
            raise DagDefinitionError(
                f'task "{task_id}" of DAG "{dag.dag_id}": ' + "; ".join(problems),
                file=file,
                line=line,
            )
        spec = TaskSpec(
            task_id=task_id,
            fn=self.fn,
            args=tuple(_to_ref(a) for a in args),
            kwargs={k: _to_ref(v) for k, v in kwargs.items()},
            retry=RetryPolicy(
                retries=int(opts.get("retries", 0)),
                delay=float(_seconds(opts.get("retry_delay", 1.0))),
                backoff=float(opts.get("retry_backoff", 2.0)),
                max_delay=float(_seconds(opts.get("retry_max_delay", 300.0))),
                jitter=bool(opts.get("retry_jitter", True)),
            ),
            soft_time_limit=_opt_seconds(opts.get("soft_time_limit")),
            time_limit=_opt_seconds(opts.get("time_limit")),
            queue=opts.get("queue"),
            priority=opts.get("priority"),
            pool=opts.get("pool"),
            pool_slots=opts.get("pool_slots", 1),
            trigger_rule=opts.get("trigger_rule", "all_success"),
            dedupe_key=opts.get("dedupe_key"),
            map_over=map_over,
            on_retry=opts.get("on_retry"),
            on_failure=opts.get("on_failure"),
            callbacks=callbacks if isinstance(callbacks, dict) else {},
            file=file,
            line=line,
            outlets=outlet_names(opts.get("outlets")),
        )
        dag.add_task(spec)
        groups.add_member(dag, task_id)
        return TaskRef(dag, task_id)

    @staticmethod
    def _free_id(dag: model.DAG, base: str) -> str:
        if base not in dag.tasks:
            return base
        n = 1
        while f"{base}__{n}" in dag.tasks:
            n += 1
        return f"{base}__{n}"


def _to_ref(value: Any) -> Any:
    return model.map_leaves(value, lambda v: Ref(v.task_id) if isinstance(v, TaskRef) else v)


def _opt_seconds(value: float | timedelta | None) -> float | None:
    return None if value is None else _seconds(value)


@overload
def task(fn: Callable[..., Any], /) -> Task: ...
@overload
def task(fn: None = None, /, **options: Any) -> Callable[[Callable[..., Any]], Task]: ...


def task(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Make a function a task: ``@task`` or ``@task(retries=3, queue="io", ...)``."""
    if fn is not None:
        return Task(fn, options)

    def wrap(f: Callable[..., Any]) -> Task:
        return Task(f, options)

    return wrap
