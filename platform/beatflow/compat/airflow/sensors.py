"""Airflow's sensors on beatflow's native ones (``beatflow.dag.sensors``): an operator with a
``poke(context)`` is a task whose ``TaskSpec.sensor`` holds its ``poke_interval``, ``timeout``,
``mode``, ``soft_fail`` and ``exponential_backoff``; the worker pokes it as it pokes
``@task.sensor`` (in its slot in ``poke`` mode, Airflow's default; in ``reschedule`` mode one
poke per claim, the pokes recorded in the results database). ``deferrable=True`` is mapped onto
``reschedule`` mode: the slot is freed between pokes as a deferral frees it.

``BaseSensorOperator``, ``PythonSensor`` and ``@task.sensor``, ``BashSensor``, ``FileSensor``
(the native ``beatflow.sensors.FileSensor`` poke), ``TimeSensor``, ``TimeDeltaSensor``,
``DateTimeSensor``, ``DayOfWeekSensor`` and ``ExternalTaskSensor`` (the native ``ExternalRun``
poke); ``ExternalTaskMarker``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, time, timedelta
from typing import Any

from beatflow.compat.airflow import running
from beatflow.compat.airflow.clock import WeekDay
from beatflow.compat.airflow.dag import caller
from beatflow.compat.airflow.finder import unsupported
from beatflow.compat.airflow.operators import BaseOperator
from beatflow.dag.sensors import PokeResult, sensor_spec
from beatflow.errors import DagDefinitionError

# a deferred time sensor wakes at its target: in reschedule mode it pokes at most this far apart
DEFERRED_TIME_POKE_SECONDS = 5.0


class PokeReturnValue:
    """``airflow.sdk.PokeReturnValue(is_done, xcom_value)``."""

    def __init__(self, is_done: bool, xcom_value: Any = None) -> None:
        self.is_done = is_done
        self.xcom_value = xcom_value

    def __bool__(self) -> bool:
        return bool(self.is_done)


def as_poke(value: Any) -> PokeResult:
    """What Airflow's ``poke`` returned as the native poke's result: a ``PokeReturnValue``
    carries its value; a bool is done or not, with no value (Airflow pushes none)."""
    if isinstance(value, PokeReturnValue):
        return PokeResult(bool(value.is_done), value.xcom_value)
    if isinstance(value, PokeResult):
        return value
    return PokeResult(bool(value), None)


class BaseSensorOperator(BaseOperator):
    """``BaseSensorOperator``: subclasses write ``poke(context)``, returning a bool or a
    ``PokeReturnValue``."""

    def __init__(
        self,
        *,
        poke_interval: float | timedelta = 60.0,
        timeout: float | timedelta = 7 * 24 * 3600.0,
        soft_fail: bool = False,
        mode: str = "poke",
        exponential_backoff: bool = False,
        max_wait: float | timedelta | None = None,
        deferrable: bool = False,
        silent_fail: bool = False,
        never_fail: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if silent_fail or never_fail:
            raise unsupported("silent_fail/never_fail", "sensor errors end the poke as errors")
        try:
            self.spec.sensor = sensor_spec(
                poke_interval=poke_interval,
                timeout=timeout,
                mode="reschedule" if deferrable else mode,
                soft_fail=soft_fail,
                exponential_backoff=exponential_backoff,
                max_wait=max_wait,
            )
        except ValueError as exc:
            file, line = caller()
            raise DagDefinitionError(
                f'sensor "{self.task_id}": {exc}', file=file, line=line
            ) from None
        self.deferrable = deferrable

    def poke(self, context: Mapping[str, Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define poke(context)")

    def execute(self, context: Mapping[str, Any]) -> PokeResult:
        return as_poke(self.poke(context))


class PythonSensor(BaseSensorOperator):
    """``PythonSensor(python_callable=..., op_args=..., op_kwargs=..., templates_dict=...)``."""

    template_fields: Sequence[str] = ("templates_dict", "op_args", "op_kwargs")

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Sequence[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        templates_dict: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.op_args = list(op_args or ())
        self.op_kwargs = dict(op_kwargs or {})
        self.templates_dict = templates_dict

    def poke(self, context: Mapping[str, Any]) -> Any:
        return running.call_python(self, context)


class DecoratedSensorOperator(PythonSensor):
    """``@task.sensor(poke_interval=..., timeout=..., mode=...)``."""

    expand_into = "op_kwargs"


class BashSensor(BaseSensorOperator):
    """``BashSensor(bash_command=...)``: done when the command exits 0."""

    template_fields: Sequence[str] = ("bash_command", "env")

    def __init__(
        self,
        *,
        bash_command: str,
        env: Mapping[str, str] | None = None,
        output_encoding: str = "utf-8",
        retry_exit_code: int | None = None,
        cwd: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bash_command = bash_command
        self.env = env
        self.retry_exit_code = retry_exit_code
        self.cwd = cwd

    def poke(self, context: Mapping[str, Any]) -> bool:
        done = subprocess.run(
            ["bash", "-c", str(self.bash_command)],
            capture_output=True,
            text=True,
            env=None if self.env is None else dict(self.env),
            cwd=self.cwd,
            check=False,
        )
        for line in (done.stdout + done.stderr).splitlines():
            context["ti"].log.info("%s", line)
        if self.retry_exit_code is not None and done.returncode not in (0, self.retry_exit_code):
            raise RuntimeError(f"Bash command failed with exit code {done.returncode}")
        return done.returncode == 0


class FileSensor(BaseSensorOperator):
    """``FileSensor(filepath=...)``: the native ``beatflow.sensors.FileSensor`` poke (a glob;
    ``recursive`` lets ``**`` match folders). Connections are not mapped: the path is local."""

    template_fields: Sequence[str] = ("filepath",)

    def __init__(
        self,
        *,
        filepath: str,
        fs_conn_id: str = "fs_default",
        recursive: bool = False,
        **kwargs: Any,
    ) -> None:
        if fs_conn_id != "fs_default":
            raise unsupported(f"FileSensor(fs_conn_id={fs_conn_id!r})", "Airflow Connections")
        super().__init__(**kwargs)
        self.filepath = filepath
        self.recursive = recursive

    def poke(self, context: Mapping[str, Any]) -> bool:
        from beatflow import sensors

        found = sensors.FileSensor(str(self.filepath)).fn(context["ti"].ctx)
        return bool(found.is_done)


class TimeSensor(BaseSensorOperator):
    """``TimeSensor(target_time=...)``: done from that time of day (UTC) of the day the DAG
    file was loaded, as Airflow fixes it when it parses the file."""

    def __init__(self, *, target_time: time, **kwargs: Any) -> None:
        _deferred_time(kwargs)
        super().__init__(**kwargs)
        tz = target_time.tzinfo or UTC
        self.target = datetime.combine(datetime.now(UTC).date(), target_time.replace(tzinfo=tz))

    def poke(self, context: Mapping[str, Any]) -> bool:
        return datetime.now(UTC) >= self.target


class TimeDeltaSensor(BaseSensorOperator):
    """``TimeDeltaSensor(delta=...)``: done ``delta`` after the run's data interval end (its
    logical date)."""

    def __init__(self, *, delta: timedelta, **kwargs: Any) -> None:
        _deferred_time(kwargs)
        super().__init__(**kwargs)
        self.delta = delta

    def poke(self, context: Mapping[str, Any]) -> bool:
        end: datetime = context["data_interval_end"]
        return datetime.now(UTC) >= end + self.delta


class DateTimeSensor(BaseSensorOperator):
    """``DateTimeSensor(target_time=...)``: done from that moment (a datetime, or a templated
    ISO 8601 string such as ``"{{ data_interval_end }}"``)."""

    template_fields: Sequence[str] = ("target_time",)

    def __init__(self, *, target_time: str | datetime, **kwargs: Any) -> None:
        _deferred_time(kwargs)
        super().__init__(**kwargs)
        self.target_time = target_time

    def poke(self, context: Mapping[str, Any]) -> bool:
        value = self.target_time
        target = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        return datetime.now(UTC) >= (target if target.tzinfo else target.replace(tzinfo=UTC))


def _deferred_time(kwargs: dict[str, Any]) -> None:
    """A deferred time sensor fires at its target: pokes at most 5 s apart."""
    kwargs.pop("end_from_trigger", None)
    kwargs.pop("start_from_trigger", None)
    if kwargs.get("deferrable"):
        given = kwargs.get("poke_interval", DEFERRED_TIME_POKE_SECONDS)
        seconds = given.total_seconds() if isinstance(given, timedelta) else float(given)
        kwargs["poke_interval"] = min(seconds, DEFERRED_TIME_POKE_SECONDS)


class DayOfWeekSensor(BaseSensorOperator):
    """``DayOfWeekSensor(week_day=...)``: done on the given week day(s) (today in UTC, or the
    run's logical date with ``use_task_logical_date``)."""

    def __init__(
        self, *, week_day: Any, use_task_logical_date: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.week_days = WeekDay.validate_week_day(week_day)
        self.use_task_logical_date = use_task_logical_date

    def poke(self, context: Mapping[str, Any]) -> bool:
        when = context["logical_date"] if self.use_task_logical_date else datetime.now(UTC)
        return when.isoweekday() in self.week_days


class ExternalTaskSensor(BaseSensorOperator):
    """``ExternalTaskSensor(external_dag_id=..., external_task_id=...)``: the native
    ``beatflow.sensors.ExternalRun`` poke, on the run of that DAG at this run's logical date
    (moved by ``execution_delta``). ``deferrable=True`` pokes every ``poll_interval``."""

    def __init__(
        self,
        *,
        external_dag_id: str,
        external_task_id: str | None = None,
        external_task_ids: Collection[str] | None = None,
        external_task_group_id: str | None = None,
        allowed_states: Collection[str] | None = None,
        skipped_states: Collection[str] | None = None,
        failed_states: Collection[str] | None = None,
        execution_delta: timedelta | None = None,
        execution_date_fn: Callable[..., Any] | None = None,
        check_existence: bool = False,
        poll_interval: float = 2.0,
        **kwargs: Any,
    ) -> None:
        ids = list(external_task_ids or ())
        if external_task_id is not None:
            ids = [external_task_id]
        if external_task_group_id is not None or len(ids) > 1:
            raise unsupported("ExternalTaskSensor on a task group or several tasks")
        if execution_date_fn is not None or skipped_states:
            raise unsupported("ExternalTaskSensor(execution_date_fn=/skipped_states=)")
        if kwargs.get("deferrable"):
            kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.external_dag_id = external_dag_id
        self.external_task_id = ids[0] if ids else None
        self.allowed_states = list(allowed_states or ["success"])
        self.failed_states = list(failed_states or ())
        self.execution_delta = execution_delta

    def poke(self, context: Mapping[str, Any]) -> PokeResult:
        import dataclasses

        from beatflow import sensors

        ctx = context["ti"].ctx
        if self.execution_delta is not None and ctx.logical_date is not None:
            ctx = dataclasses.replace(ctx, logical_date=ctx.logical_date - self.execution_delta)
        made = sensors.ExternalRun(
            self.external_dag_id,
            self.external_task_id,
            allowed_states=self.allowed_states,
            failed_states=self.failed_states,
        )
        done: PokeResult = made.fn(ctx)
        return PokeResult(done.is_done, None)


class ExternalTaskMarker(BaseOperator):
    """``ExternalTaskMarker``: a marker for Airflow's recursive clear (beatflow's clear does not
    follow it into the other DAG); it does nothing when it runs."""

    def __init__(
        self,
        *,
        external_dag_id: str,
        external_task_id: str,
        logical_date: str | None = None,
        recursion_depth: int = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.external_dag_id = external_dag_id
        self.external_task_id = external_task_id

    def execute(self, context: Mapping[str, Any]) -> None:
        return None
