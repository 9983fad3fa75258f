"""``@task`` (and ``@task.python``, ``@task.bash``, ``@task.virtualenv``...) as Airflow
writes it: a call inside a DAG adds an operator and returns its XComArg; ``.override()``,
``.partial()``, ``.expand()``."""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Mapping
from typing import Any

from beatflow.compat.airflow import running
from beatflow.compat.airflow.dag import current_dag
from beatflow.compat.airflow.external import (
    BranchExternalDecoratedOperator,
    ExternalDecoratedOperator,
)
from beatflow.compat.airflow.finder import unsupported
from beatflow.compat.airflow.mapping import Partial
from beatflow.compat.airflow.operators import BaseOperator, XComArg
from beatflow.compat.airflow.sensors import DecoratedSensorOperator
from beatflow.compat.airflow.standard import (
    BashOperator,
    BranchPythonOperator,
    PythonOperator,
    ShortCircuitOperator,
    run_bash,
)
from beatflow.compat.airflow.virtualenv import (
    BranchVirtualenvDecoratedOperator,
    VirtualenvDecoratedOperator,
)


class DecoratedOperator(PythonOperator):
    """The operator a ``@task`` call adds; ``expand(x=...)`` maps into its function's kwargs."""

    expand_into = "op_kwargs"


class BranchDecoratedOperator(BranchPythonOperator):
    """``@task.branch``: returns the task id(s) to follow."""

    expand_into = "op_kwargs"


class ShortCircuitDecoratedOperator(ShortCircuitOperator):
    """``@task.short_circuit``: a falsy result skips what follows."""

    expand_into = "op_kwargs"


class BashDecoratedOperator(BashOperator):
    """``@task.bash``: the function returns the command (rendered, then run in bash)."""

    expand_into = "op_kwargs"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Any = (),
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(bash_command=None, **kwargs)
        self.python_callable = python_callable
        self.op_args = list(op_args)
        self.op_kwargs = dict(op_kwargs or {})

    def execute(self, context: Mapping[str, Any]) -> Any:
        command = running.call(self.python_callable, self.op_args, self.op_kwargs, context)
        if not isinstance(command, str) or not command.strip():
            raise TypeError("a @task.bash function must return a non-empty command string")
        return run_bash(self, running.render(command, context), context)


def _returns_dict(fn: Callable[..., Any]) -> bool:
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # noqa: BLE001 - an unresolvable annotation infers nothing
        return False
    return hint is dict or typing.get_origin(hint) is dict


class TaskFunction:
    """A decorated function: called inside a DAG it adds a task, outside it runs."""

    def __init__(
        self,
        fn: Callable[..., Any],
        options: Mapping[str, Any],
        cls: type[BaseOperator],
        role: str | None = None,
    ) -> None:
        self.function = fn
        self.options = dict(options)
        self.cls = cls
        self.role = role  # "setup" or "teardown" (@setup, @teardown)
        # @task.run_if / @task.skip_if: (kind, condition(context), skip message)
        self.conditions: tuple[tuple[str, Callable[..., Any], str | None], ...] = ()
        functools.update_wrapper(self, fn)

    def override(self, **options: Any) -> TaskFunction:
        made = TaskFunction(self.function, {**self.options, **options}, self.cls, self.role)
        made.conditions = self.conditions
        return made

    def _make(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> BaseOperator:
        owner = self.options.get("dag") or current_dag.get()
        opts = dict(self.options)
        fail_run = opts.pop("on_failure_fail_dagrun", None)
        if "multiple_outputs" not in opts:
            opts["multiple_outputs"] = _returns_dict(self.function)
        base = opts.pop("task_id", None) or self.function.__name__
        task_id = base
        if owner is not None and "task_id" not in self.options:
            n = 0
            while task_id in owner.operators:
                n += 1
                task_id = f"{base}__{n}"
        op = self.cls(
            task_id=task_id,
            python_callable=self.function,
            op_args=args,
            op_kwargs=dict(kwargs),
            **opts,
        )
        op.conditions = self.conditions
        if self.role == "setup":
            op.as_setup()
        elif self.role == "teardown":
            op.as_teardown(on_failure_fail_dagrun=fail_run)
        return op

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if current_dag.get() is None and "dag" not in self.options:
            return self.function(*args, **kwargs)
        return XComArg(self._make(args, kwargs))

    def partial(self, **fixed: Any) -> Partial:
        return Partial(lambda **kw: self._make((), kw), fixed)

    def expand(self, **mapped: Any) -> XComArg:
        return self.partial().expand(**mapped)

    def expand_kwargs(self, values: Any, *, strict: bool = True) -> XComArg:
        return self.partial().expand_kwargs(values, strict=strict)


def _decorator(cls: type[BaseOperator]) -> Callable[..., Any]:
    def deco(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        if fn is None and "python_callable" in options:
            fn = options.pop("python_callable")
        if fn is not None:
            return TaskFunction(fn, options, cls)
        return lambda f: TaskFunction(f, options, cls)

    return deco


_NOT_YET = {
    "docker": "@task.docker",
    "kubernetes": "@task.kubernetes (Kubernetes)",
}


class _Task:
    """``task``: ``@task``, ``@task(...)``, ``@task.python``, ``@task.bash``, the branch,
    short-circuit, sensor, external-Python and virtualenv kinds."""

    def __init__(self) -> None:
        self.python = _decorator(DecoratedOperator)
        self.bash = _decorator(BashDecoratedOperator)
        self.branch = _decorator(BranchDecoratedOperator)
        self.short_circuit = _decorator(ShortCircuitDecoratedOperator)
        self.sensor = _decorator(DecoratedSensorOperator)
        self.external_python = _decorator(ExternalDecoratedOperator)
        self.branch_external_python = _decorator(BranchExternalDecoratedOperator)
        self.virtualenv = _decorator(VirtualenvDecoratedOperator)
        self.branch_virtualenv = _decorator(BranchVirtualenvDecoratedOperator)

    def __call__(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        return self.python(fn, **options)

    def run_if(self, condition: Callable[..., Any], skip_message: str | None = None) -> Any:
        """``@task.run_if(lambda context: ...)`` over a task: skipped unless it holds."""
        return _condition("run_if", condition, skip_message)

    def skip_if(self, condition: Callable[..., Any], skip_message: str | None = None) -> Any:
        """``@task.skip_if(lambda context: ...)`` over a task: skipped when it holds."""
        return _condition("skip_if", condition, skip_message)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise unsupported(f"task.{name}", _NOT_YET.get(name))


def _condition(kind: str, condition: Callable[..., Any], message: str | None) -> Any:
    def wrap(fn: Any) -> TaskFunction:
        made = fn if isinstance(fn, TaskFunction) else TaskFunction(fn, {}, DecoratedOperator)
        made = made.override()
        made.conditions = (*made.conditions, (kind, condition, message))
        return made

    return wrap


task = _Task()


def _role(role: str) -> Callable[..., Any]:
    def deco(fn: Any = None, /, **options: Any) -> Any:
        def make(f: Any) -> TaskFunction:
            if isinstance(f, TaskFunction):  # @setup over @task.bash and the like
                return TaskFunction(f.function, {**f.options, **options}, f.cls, role)
            return TaskFunction(f, options, DecoratedOperator, role)

        return make(fn) if fn is not None else make

    return deco


setup = _role("setup")  # ``@setup``: a setup task (setup_teardown)
teardown = _role("teardown")  # ``@teardown`` / ``@teardown(on_failure_fail_dagrun=True)``
