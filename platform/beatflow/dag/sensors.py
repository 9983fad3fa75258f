"""Sensors, as Airflow users know them: ``@task.sensor(poke_interval=..., timeout=...,
mode="reschedule" | "poke", soft_fail=False, exponential_backoff=False, max_wait=None)``.

The function is a *poke*: it returns a bool, a value (truthy: done, and the value is the task's
result) or a ``PokeResult(is_done, value)``. In ``poke`` mode the worker pokes in its slot,
sleeping ``poke_interval`` between pokes. In ``reschedule`` mode a poke that is not done ends its
try ``up_for_reschedule`` and frees the slot; the next poke is the same Celery message again with
a countdown, and the pokes (count, first, next) are in the results database, so the reconciler
re-sends a sensor whose next poke is overdue and a duplicate poke message finds its poke taken
(``worker/sensor.py``). A timeout (from the first poke) fails the task run, or with
``soft_fail`` skips it. Reschedules do not consume retries; a poke that raises does."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from beatflow.dag import authoring, model
from beatflow.errors import DagDefinitionError

__all__ = ["PokeResult", "SensorSpec", "SensorTask", "poked"]

MODES = ("reschedule", "poke")


@dataclass(frozen=True, slots=True)
class PokeResult:
    """What a poke may return: whether the sensor is done, and its result when it is (as
    Airflow's ``PokeReturnValue(is_done, xcom_value)``)."""

    is_done: bool
    value: Any = None


@dataclass(frozen=True, slots=True)
class SensorSpec:
    """A sensor task's options (``TaskSpec.sensor``)."""

    poke_interval: float = 60.0
    timeout: float = 7 * 24 * 3600.0  # Airflow's default: a week
    mode: str = "reschedule"
    soft_fail: bool = False
    exponential_backoff: bool = False
    max_wait: float | None = None

    def interval(self, pokes: int) -> float:
        """Seconds to wait after poke number ``pokes`` (1-based) before the next."""
        wait = self.poke_interval
        if self.exponential_backoff:
            wait = self.poke_interval * 2 ** min(max(0, pokes - 1), 30)
        return min(wait, self.max_wait) if self.max_wait is not None else wait


def poked(value: Any) -> tuple[bool, Any]:
    """A poke's return as (done, the task's result when done)."""
    if isinstance(value, PokeResult):
        return bool(value.is_done), value.value
    return bool(value), value


def _seconds(name: str, value: Any, *, positive: bool = True) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{name} must be seconds (number or timedelta) >= 0, got {value!r:.40}")
    if positive and value == 0:
        raise ValueError(f"{name} must be more than 0 seconds")
    return float(value)


def sensor_spec(
    *,
    poke_interval: float | timedelta = 60.0,
    timeout: float | timedelta = 7 * 24 * 3600.0,
    mode: str = "reschedule",
    soft_fail: bool = False,
    exponential_backoff: bool = False,
    max_wait: float | timedelta | None = None,
) -> SensorSpec:
    """The options checked (ValueError with the reason)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r:.40}")
    return SensorSpec(
        poke_interval=_seconds("poke_interval", poke_interval),
        timeout=_seconds("timeout", timeout, positive=False),
        mode=mode,
        soft_fail=bool(soft_fail),
        exponential_backoff=bool(exponential_backoff),
        max_wait=None if max_wait is None else _seconds("max_wait", max_wait),
    )


SENSOR_OPTIONS = frozenset(
    {"poke_interval", "timeout", "mode", "soft_fail", "exponential_backoff", "max_wait"}
)


class SensorTask(authoring.Task):
    """A task whose function is a poke (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], options: Mapping[str, Any]) -> None:
        sensing = {k: v for k, v in options.items() if k in SENSOR_OPTIONS}
        try:
            self.sensor = sensor_spec(**sensing)
        except ValueError as exc:
            file, line = authoring._caller()
            raise DagDefinitionError(
                f"@task.sensor {getattr(fn, '__name__', fn)}: {exc}", file=file, line=line
            ) from None
        super().__init__(fn, {k: v for k, v in options.items() if k not in SENSOR_OPTIONS})
        self._sensing = sensing

    def override(self, **options: Any) -> SensorTask:
        return SensorTask(self.fn, {**self.options, **self._sensing, **options})

    def _add(
        self,
        dag: model.DAG,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        map_over: str | None,
    ) -> authoring.TaskRef:
        ref = super()._add(dag, args, kwargs, map_over)
        dag.tasks[ref.task_id].sensor = self.sensor
        return ref


def sensor(fn: Callable[..., Any] | None, options: dict[str, Any]) -> Any:
    """``@task.sensor`` and ``@task.sensor(...)``."""
    if fn is not None:
        return SensorTask(fn, options)
    return lambda f: SensorTask(f, options)


def builtin(fn: Callable[..., Any], options: Mapping[str, Any]) -> Any:
    """A built-in sensor (``beatflow.sensors``): inside a DAG block, the task added (its
    TaskRef, as Airflow's sensors are operators); outside, the sensor task to call in one."""
    made = SensorTask(fn, options)
    return made() if authoring._current_dag.get() is not None else made
