"""What an Airflow task does when beatflow's worker runs it: the context (``ti``, ``ds``,
``params``, ``dag_run.conf``...), ``ti.xcom_push``/``xcom_pull`` over the results of the task's
ancestors, Jinja rendering of templated fields, and the call of ``execute(context)``.

Keyed pushes travel with the task's result: a task that pushed keys returns
``{"__airflow_xcom__": {key: value}, "return_value": result}`` to the results DB."""

from __future__ import annotations

import asyncio
import contextvars
import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from beatflow.compat.airflow.finder import airflow_imports
from beatflow.dag.flow import Skip
from beatflow.dag.model import map_leaves
from beatflow.dag.sensors import PokeResult
from beatflow.extras import require

if TYPE_CHECKING:
    from beatflow.compat.airflow.operators import BaseOperator

ENVELOPE = "__airflow_xcom__"
_current: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("airflow_context")


def get_current_context() -> dict[str, Any]:
    """``airflow.sdk.get_current_context()``: the running task's context."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError(
            "get_current_context() is only available inside a running task"
        ) from None


def split(result: Any) -> tuple[Any, dict[str, Any]]:
    """A stored result as (return value, keyed pushes)."""
    if isinstance(result, dict) and ENVELOPE in result:
        return result.get("return_value"), dict(result[ENVELOPE])
    return result, {}


class TaskInstance:
    """``ti`` / ``task_instance``: ids, ``xcom_push``, ``xcom_pull``, ``log``."""

    def __init__(self, op: BaseOperator, ctx: Any, results: Mapping[str, Any]) -> None:
        self.task = op
        self.task_id = op.task_id
        self.dag_id = op.dag.dag_id
        self.run_id = ctx.run_id
        self.map_index = ctx.map_index
        self.try_number = ctx.try_number
        self.log = ctx.log
        self.results = results
        self.ctx = ctx
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any, **kw: Any) -> None:
        self.pushed[key] = value

    def _one(self, task_id: str, key: str) -> Any:
        if task_id == self.task_id:
            return self.pushed.get(key)
        if task_id not in self.results:
            if task_id not in self.task.dag.operators:
                return None
            self.results = {**self.results, task_id: _stored_result(self, task_id)}
        op = self.task.dag.operators.get(task_id)
        value, pushes = split(self.results[task_id])
        if isinstance(value, list) and op is not None and op.expanded is not None:
            parts = [split(v) for v in value]
            if key == "return_value":
                return [v for v, _ in parts]
            return [p.get(key) for _, p in parts]
        if key == "return_value":
            return value
        if key in pushes:
            return pushes[key]
        if op is not None and op.multiple_outputs and isinstance(value, dict):
            return value.get(key)
        return None

    def xcom_pull(
        self,
        task_ids: str | Sequence[str] | None = None,
        dag_id: str | None = None,
        key: str = "return_value",
        include_prior_dates: bool = False,
        map_indexes: Any = None,
        default: Any = None,
        **kw: Any,
    ) -> Any:
        if task_ids is None:
            for tid in self.results:
                value = self._one(tid, key)
                if value is not None:
                    return value
            return default
        if isinstance(task_ids, str):
            value = self._one(task_ids, key)
            return default if value is None else value
        return [self._one(t, key) for t in task_ids]


def _stored_result(ti: TaskInstance, task_id: str) -> Any:
    """The result of a task of this run that is not a direct upstream (Airflow pulls from any
    task of the run): read from the results database, None until it succeeded."""
    from celery import current_task

    from beatflow.runtime import runtime_of
    from beatflow.states import TaskRunState

    store = runtime_of(current_task.app).store
    rows = store.get_task_runs(ti.dag_id, ti.run_id, [task_id])
    own = [r for r in rows if r.map_index < 0 and r.state == TaskRunState.SUCCESS]
    if not own:
        return None
    instances = sorted((r for r in rows if r.map_index >= 0), key=lambda r: r.map_index)
    if own[0].map_count is not None:  # a mapped task: the list of its instances' results
        return [r.result for r in instances]
    return own[0].result


class _DagRun:
    def __init__(self, ctx: Any, logical: datetime) -> None:
        self.conf = dict(ctx.params)
        self.run_id = ctx.run_id
        self.dag_id = ctx.dag_id
        self.logical_date = logical
        self.run_type = "manual" if ctx.run_id.startswith("manual") else "scheduled"


def _ds_add(ds: str, days: int) -> str:
    return (datetime.strptime(ds, "%Y-%m-%d") + timedelta(days=days)).strftime("%Y-%m-%d")


def _ds_format(ds: str, input_format: str, output_format: str) -> str:
    return datetime.strptime(ds, input_format).strftime(output_format)


class _Macros:
    ds_add = staticmethod(_ds_add)
    ds_format = staticmethod(_ds_format)
    datetime = datetime
    timedelta = timedelta


def build_context(op: BaseOperator, ctx: Any, results: Mapping[str, Any]) -> dict[str, Any]:
    logical = ctx.logical_date or datetime.now(UTC)
    ti = TaskInstance(op, ctx, results)
    params = {**op.dag.params, **op.params, **dict(ctx.params)}
    return {
        "ti": ti,
        "task_instance": ti,
        "task": op,
        "dag": op.dag,
        "dag_run": _DagRun(ctx, logical),
        "run_id": ctx.run_id,
        "params": params,
        "logical_date": logical,
        "execution_date": logical,
        "data_interval_start": logical,
        "data_interval_end": logical,
        "ds": logical.strftime("%Y-%m-%d"),
        "ds_nodash": logical.strftime("%Y%m%d"),
        "ts": logical.isoformat(),
        "ts_nodash": logical.strftime("%Y%m%dT%H%M%S"),
        "task_instance_key_str": f"{op.dag.dag_id}__{op.task_id}__{logical:%Y%m%d}",
        "map_index": ctx.map_index,
        "try_number": ctx.try_number,
        "macros": _Macros,
        "test_mode": False,
        "inlets": [],
        "outlets": [],
        "conn": None,
        "var": None,
    }


def render(content: Any, context: Mapping[str, Any]) -> Any:
    """``content`` with every string rendered as a Jinja template against ``context``."""

    def one(leaf: Any) -> Any:
        if not isinstance(leaf, str) or "{" not in leaf:
            return leaf
        require("airflow", "Jinja templates of an Airflow DAG file")
        import jinja2  # the airflow extra: only a templated string needs it

        return jinja2.Environment(autoescape=False).from_string(leaf).render(**context)

    return map_leaves(content, one)


def call_python(op: Any, context: Mapping[str, Any]) -> Any:
    """A PythonOperator's or PythonSensor's callable with its ``op_args``, ``op_kwargs`` and
    ``templates_dict`` (put in the context, as Airflow does)."""
    if op.templates_dict is not None:
        context = {**context, "templates_dict": op.templates_dict}
    return call(op.python_callable, op.op_args, op.op_kwargs, context)


def call(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    context: Mapping[str, Any],
) -> Any:
    """Call ``fn`` as Airflow does: its arguments, plus the context entries it names (all of
    them when it takes ``**kwargs``); an ``async def`` one is run to its end (Airflow 3.2+)."""
    result = _call(fn, args, kwargs, context)
    return asyncio.run(result) if inspect.iscoroutine(result) else result


def _call(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    context: Mapping[str, Any],
) -> Any:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn(*args, **kwargs)
    params = list(sig.parameters.values())
    taken = {p.name for p in params[: len(args)]} | set(kwargs)
    extra: dict[str, Any] = {}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        extra = {k: v for k, v in context.items() if k not in taken}
    else:
        extra = {
            p.name: context[p.name]
            for p in params[len(args) :]
            if p.name in context and p.name not in taken and p.kind is not p.VAR_POSITIONAL
        }
    return fn(*args, **kwargs, **extra)


class Runner:
    """The function of an Airflow task's TaskSpec: the worker calls it with the mapped item
    (if any), the ancestors' results and the beatflow context."""

    def __init__(self, op: BaseOperator) -> None:
        self.op = op
        self.__name__ = self.__qualname__ = f"{op.dag.dag_id}.{op.task_id}"

    def __call__(self, *items: Any, ctx: Any, upstream: Mapping[str, Any] | None = None) -> Any:
        results = dict(upstream or {})
        op = copy.copy(self.op)
        op.__dict__.update({k: copy.copy(v) for k, v in vars(self.op).items() if k != "dag"})
        context = build_context(op, ctx, results)
        ti: TaskInstance = context["ti"]
        if op.expanded is not None and items:
            _expanded_into(op, items[0])

        def resolve(leaf: Any) -> Any:
            from beatflow.compat.airflow.operators import XComArg

            if isinstance(leaf, XComArg):
                return ti.xcom_pull(task_ids=leaf.operator.task_id, key=leaf.key)
            return leaf

        for name, value in list(vars(op).items()):
            if name not in ("dag", "spec", "params"):
                setattr(op, name, map_leaves(value, resolve))
        for name in op.template_fields:
            setattr(op, name, render(getattr(op, name, None), context))
        _may_run(op, ti, context)
        token = _current.set(context)
        try:
            with airflow_imports():  # a task function may import airflow names as it runs
                result = op.execute(context)
        finally:
            _current.reset(token)
        if isinstance(result, PokeResult):  # a sensor's poke: its value only when done
            if not result.is_done:
                return result
            return PokeResult(True, _pushed(op, ti, result.value))
        return _pushed(op, ti, result)


def _expanded_into(op: BaseOperator, item: Any) -> None:
    """A mapped task run's item set on its operator: one argument, or a dict of them."""
    from beatflow.compat.airflow.mapping import KWARGS

    target = getattr(op, "expand_into", None)
    given = item if op.expanded == KWARGS else {op.expanded: item}
    if not isinstance(given, dict):
        raise TypeError(f"expand_kwargs() maps over dicts, got {type(given).__name__}")
    for name, value in given.items():
        if target is not None:
            getattr(op, target)[name] = value
        else:
            setattr(op, name, value)


def _may_run(op: BaseOperator, ti: TaskInstance, context: Mapping[str, Any]) -> None:
    """Raise Skip (or fail) before a task runs: a teardown whose setups did not succeed, a
    ``@task.run_if`` / ``@task.skip_if`` condition."""
    if op.is_teardown:
        from beatflow.compat.airflow import setup_teardown

        setup_teardown.check_setups(op, ti)
    for kind, condition, message in getattr(op, "conditions", ()):
        holds = bool(condition(context))
        if holds != (kind == "run_if"):
            said = "held" if holds else "did not hold"
            raise Skip(message or f"{kind}: the condition {said}")


def _pushed(op: BaseOperator, ti: TaskInstance, result: Any) -> Any:
    """The stored result: the return value (None without ``do_xcom_push``), with the keyed
    pushes around it when the task made any."""
    if not op.do_xcom_push:
        result = None
    if ti.pushed:
        return {ENVELOPE: ti.pushed, "return_value": result}
    return result
