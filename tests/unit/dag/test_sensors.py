"""Sensor options and poke results, pure: what a poke's return means, the waits between pokes,
and the options refused when the DAG file loads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from beatflow import DAG, FileSensor, PokeResult, task
from beatflow.dag.sensors import SensorSpec, poked, sensor_spec
from beatflow.errors import DagDefinitionError


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, (True, True)),
        (False, (False, False)),
        (None, (False, None)),
        ({"rows": 3}, (True, {"rows": 3})),
        ([], (False, [])),
        (PokeResult(False, "x"), (False, "x")),
        (PokeResult(True), (True, None)),
        (PokeResult(True, 0), (True, 0)),  # done with a falsy value
    ],
)
def test_what_a_poke_returns(value, expected) -> None:
    assert poked(value) == expected


def test_the_wait_between_pokes_with_and_without_backoff() -> None:
    plain = SensorSpec(poke_interval=5)
    assert [plain.interval(n) for n in (1, 2, 3)] == [5, 5, 5]
    backoff = SensorSpec(poke_interval=5, exponential_backoff=True, max_wait=30)
    assert [backoff.interval(n) for n in (1, 2, 3, 4, 5)] == [5, 10, 20, 30, 30]
    assert SensorSpec(poke_interval=1, exponential_backoff=True).interval(10_000) == 2.0**30


def test_options_are_checked_and_timedeltas_taken() -> None:
    spec = sensor_spec(poke_interval=timedelta(minutes=1), timeout=timedelta(hours=1))
    assert (spec.poke_interval, spec.timeout, spec.mode) == (60.0, 3600.0, "reschedule")
    with pytest.raises(ValueError, match="mode must be one of reschedule, poke"):
        sensor_spec(mode="sleep")
    with pytest.raises(ValueError, match="poke_interval must be more than 0"):
        sensor_spec(poke_interval=0)
    with pytest.raises(ValueError, match="timeout must be seconds"):
        sensor_spec(timeout=-1)


def test_a_bad_option_is_a_dag_definition_error_with_the_line() -> None:
    with pytest.raises(DagDefinitionError, match="mode must be one of"):

        @task.sensor(mode="wait")
        def nope() -> bool:
            return True


def test_sensors_are_tasks_of_their_dag_with_their_options() -> None:
    @task.sensor(poke_interval=2, mode="poke", retries=1)
    def ready() -> bool:
        return True

    with DAG("s", start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
        (
            FileSensor(path="/nowhere/*", task_id="files", timeout=10)
            >> ready.override(task_id="ready_now", soft_fail=True)()
        )
    tasks = dag.model.tasks
    assert tasks["files"].sensor == SensorSpec(poke_interval=60, timeout=10)
    assert tasks["ready_now"].sensor == SensorSpec(poke_interval=2, mode="poke", soft_fail=True)
    assert tasks["ready_now"].retry.retries == 1
    assert tasks["ready_now"].upstream == {"files"}
    assert ready() is True  # outside a DAG a sensor's function runs as it is
