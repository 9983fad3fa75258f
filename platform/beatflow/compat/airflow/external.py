"""``ExternalPythonOperator`` / ``@task.external_python`` and their branch kinds: the callable's
source, taken as Airflow takes it, runs in the Python interpreter at ``python``; its arguments and
its result cross as JSON only (never pickle, whatever ``serializer`` says)."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import tempfile
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from beatflow.compat.airflow.finder import unsupported
from beatflow.compat.airflow.standard import (
    AirflowSkipException,
    PythonOperator,
    exit_codes,
)
from beatflow.dag.flow import BRANCH

# What the other interpreter runs: the function's source, then this (stdlib only). Exit 3: the
# result is not JSON (said on stderr).
_CALL = """

def __beatflow_call():
    import json, sys
    with open(sys.argv[1], encoding="utf-8") as f:
        call = json.load(f)
    result = {name}(*call["args"], **call["kwargs"])
    try:
        text = json.dumps({{"result": result}})
    except (TypeError, ValueError) as exc:
        sys.stderr.write(f"the value {name}() returned is not JSON: {{exc}}\\n")
        sys.exit(3)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(text)


__beatflow_call()
"""


def function_source(fn: Callable[..., Any]) -> str:
    """The source of ``fn`` as a top-level function, without its decorators (Airflow's
    ``get_python_source`` and ``remove_task_decorator``): from its ``def`` line on, dedented."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise TypeError(f"the source of {fn!r} cannot be read: {exc}") from exc
    tree = ast.parse(source)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef) or node.name != fn.__name__:
        raise TypeError(f"{fn!r} must be a function written with def (not a lambda)")
    return "\n".join(source.splitlines()[node.lineno - 1 :]) + "\n"


def _json_value(value: Any, what: str, task_id: str) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f'task "{task_id}": {what} cannot go to another Python interpreter: only JSON values'
            f" do (beatflow never pickles), got {type(value).__name__}: {exc}"
        ) from exc
    return value


def _arguments(op: Any, context: Mapping[str, Any]) -> dict[str, Any]:
    """op_args, op_kwargs and the context entries the function names (for ``**kwargs``, those of
    them that are JSON), each checked to be JSON."""
    args = [_json_value(v, f"op_args[{i}]", op.task_id) for i, v in enumerate(op.op_args)]
    kwargs = {k: _json_value(v, f'op_kwargs["{k}"]', op.task_id) for k, v in op.op_kwargs.items()}
    if op.templates_dict is not None:
        context = {**context, "templates_dict": op.templates_dict}
    params = list(inspect.signature(op.python_callable).parameters.values())
    taken = {p.name for p in params[: len(args)]} | set(kwargs)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        for key, value in context.items():
            if key not in taken:
                try:
                    kwargs[key] = json.loads(json.dumps(value))
                except (TypeError, ValueError):
                    continue  # ti, dag_run, datetimes: not for another interpreter
    for p in params[len(args) :]:
        if p.name in context and p.name not in taken and p.kind is not p.VAR_POSITIONAL:
            what = f'the context entry "{p.name}"'
            kwargs[p.name] = _json_value(context[p.name], what, op.task_id)
    return {"args": args, "kwargs": kwargs}


def run_external(op: Any, python: str, context: Mapping[str, Any]) -> Any:
    """Run ``op``'s callable in the interpreter at ``python``: its output goes to the task's log;
    the result, back as JSON, is returned."""
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise FileNotFoundError(
            f'task "{op.task_id}": the Python interpreter {python!r} does not exist or is not'
            " executable on this worker (ExternalPythonOperator(python=...) names a path on the"
            " machine that runs the task)"
        )
    source = function_source(op.python_callable)
    call = _arguments(op, context)
    env = {**os.environ, **op.env_vars} if op.inherit_env else dict(op.env_vars)
    with tempfile.TemporaryDirectory(prefix="beatflow-external-") as tmp:
        script, given, out = Path(tmp, "script.py"), Path(tmp, "call.json"), Path(tmp, "out.json")
        script.write_text(source + _CALL.format(name=op.python_callable.__name__), "utf-8")
        given.write_text(json.dumps(call), "utf-8")
        done = subprocess.run(
            [python, str(script), str(given), str(out)],
            capture_output=True,
            text=True,
            cwd=tmp,
            env=env,
            check=False,
        )
        log = context["ti"].log
        for line in (done.stdout + done.stderr).splitlines():
            log.info("%s", line)
        if done.returncode in op.skip_codes:
            raise AirflowSkipException(f"the function exited with code {done.returncode}")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(
                f'task "{op.task_id}": {python} exited with code {done.returncode}: {last}'
            )
        return json.loads(out.read_text("utf-8"))["result"]


class ExternalPythonOperator(PythonOperator):
    """``ExternalPythonOperator(python=..., python_callable=..., op_args=..., op_kwargs=...)``."""

    def __init__(
        self,
        *,
        python: str | None,
        python_callable: Callable[..., Any],
        serializer: str | None = None,
        expect_airflow: bool = True,
        expect_pendulum: bool = False,
        skip_on_exit_code: int | Sequence[int] | None = None,
        env_vars: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        use_airflow_context: bool = False,
        string_args: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if use_airflow_context:
            raise unsupported(f"{type(self).__name__}(use_airflow_context=True)", "a live context")
        if string_args:
            raise unsupported(f"{type(self).__name__}(string_args=...)")
        super().__init__(python_callable=python_callable, **kwargs)
        self.python = python
        self.skip_codes = exit_codes(skip_on_exit_code)
        self.env_vars = dict(env_vars or {})
        self.inherit_env = inherit_env
        function_source(python_callable)  # a lambda or a builtin is refused where it is written

    def execute(self, context: Mapping[str, Any]) -> Any:
        return run_external(self, str(self.python or ""), context)


class BranchExternalPythonOperator(ExternalPythonOperator):
    """``BranchExternalPythonOperator``: the callable, run in ``python``, returns the task id(s)
    to follow."""

    control = BRANCH


class ExternalDecoratedOperator(ExternalPythonOperator):
    """``@task.external_python(python=...)``."""

    expand_into = "op_kwargs"


class BranchExternalDecoratedOperator(BranchExternalPythonOperator):
    """``@task.branch_external_python(python=...)``."""

    expand_into = "op_kwargs"
