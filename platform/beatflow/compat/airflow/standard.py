"""The operators of Airflow's standard provider: ``EmptyOperator``, ``PythonOperator``,
``BashOperator``, the branch and short-circuit operators (beatflow's control tasks) and
``AirflowSkipException`` (beatflow's ``Skip``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from beatflow.compat.airflow import running
from beatflow.compat.airflow.operators import BaseOperator
from beatflow.dag.flow import BRANCH, SHORT_CIRCUIT, SHORT_CIRCUIT_DIRECT, Skip


class EmptyOperator(BaseOperator):
    """``EmptyOperator`` (and 2.x's ``DummyOperator``): does nothing."""

    def execute(self, context: Mapping[str, Any]) -> None:
        return None


class PythonOperator(BaseOperator):
    """``PythonOperator(python_callable=..., op_args=..., op_kwargs=..., templates_dict=...)``."""

    template_fields: Sequence[str] = ("templates_dict", "op_args", "op_kwargs")

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Sequence[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        templates_dict: Mapping[str, Any] | None = None,
        templates_exts: Sequence[str] | None = None,
        show_return_value_in_logs: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.op_args = list(op_args or ())
        self.op_kwargs = dict(op_kwargs or {})
        self.templates_dict = templates_dict

    def execute(self, context: Mapping[str, Any]) -> Any:
        return running.call_python(self, context)


class BranchPythonOperator(PythonOperator):
    """``BranchPythonOperator``: the callable returns the task id(s) of the direct downstream
    tasks to follow; the others are skipped (beatflow's branch)."""

    control = BRANCH


class BaseBranchOperator(BaseOperator):
    """``BaseBranchOperator``: subclasses write ``choose_branch(context)``."""

    control = BRANCH

    def choose_branch(self, context: Mapping[str, Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define choose_branch(context)")

    def execute(self, context: Mapping[str, Any]) -> Any:
        return self.choose_branch(context)


class ShortCircuitOperator(PythonOperator):
    """``ShortCircuitOperator``: a falsy result skips what follows (every task downstream, or
    with ``ignore_downstream_trigger_rules=False`` the direct ones, the rest by rule)."""

    control = SHORT_CIRCUIT

    def __init__(self, *, ignore_downstream_trigger_rules: bool = True, **kwargs: Any) -> None:
        if not ignore_downstream_trigger_rules:
            self.control = SHORT_CIRCUIT_DIRECT
        super().__init__(**kwargs)


class AirflowSkipException(Skip):
    """``raise AirflowSkipException("why")``: the task run ends ``skipped`` (beatflow's Skip)."""


def exit_codes(value: int | Sequence[int] | None) -> list[int]:
    """``skip_on_exit_code`` as a list: none, one code, or several."""
    if value is None:
        return []
    return [value] if isinstance(value, int) else list(value)


class BashOperator(BaseOperator):
    """``BashOperator(bash_command=..., env=..., append_env=..., cwd=...)``: the command runs in
    ``bash -c`` in a subprocess; its last line of output is the task's result."""

    template_fields: Sequence[str] = ("bash_command", "env", "cwd")
    template_ext: Sequence[str] = (".sh", ".bash")

    def __init__(
        self,
        *,
        bash_command: str | None,
        env: Mapping[str, str] | None = None,
        append_env: bool = False,
        output_encoding: str = "utf-8",
        skip_on_exit_code: int | Sequence[int] | None = 99,
        cwd: str | None = None,
        output_processor: Callable[[str], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bash_command = bash_command
        self.env = env
        self.append_env = append_env
        self.cwd = cwd
        self.skip_codes = exit_codes(skip_on_exit_code)
        self.output_processor = output_processor

    def execute(self, context: Mapping[str, Any]) -> Any:
        return run_bash(self, str(self.bash_command), context)


def run_bash(op: BashOperator, command: str, context: Mapping[str, Any]) -> Any:
    env = None
    if op.env is not None:
        env = {**os.environ, **op.env} if op.append_env else dict(op.env)
    done = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        env=env,
        cwd=op.cwd,
        check=False,
    )
    log = context["ti"].log
    for line in done.stdout.splitlines():
        log.info("%s", line)
    for line in done.stderr.splitlines():
        log.info("%s", line)
    if done.returncode in op.skip_codes:
        raise AirflowSkipException(f"Bash command returned exit code {done.returncode}. Skipping.")
    if done.returncode != 0:
        raise RuntimeError(
            f"Bash command failed. The command returned a non-zero exit code {done.returncode}."
        )
    lines = done.stdout.rstrip("\n").splitlines()
    last = lines[-1] if lines else ""
    return op.output_processor(last) if op.output_processor else last
