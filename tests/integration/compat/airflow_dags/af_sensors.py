import os
from pathlib import Path

import pendulum
from airflow.providers.standard.sensors.bash import BashSensor
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sdk import DAG, BaseSensorOperator, PokeReturnValue, task

MARKS = Path(os.environ.get("BEATFLOW_TEST_MARKS", "/tmp/beatflow-test-marks"))


def poked(name, run_id):
    """Count one poke of ``name`` in this run (a line in a file); the number of pokes so far."""
    MARKS.mkdir(parents=True, exist_ok=True)
    with open(MARKS / f"af-{name}-{run_id}", "a") as f:
        f.write("x\n")
    return len((MARKS / f"af-{name}-{run_id}").read_text().splitlines())


class CountingSensor(BaseSensorOperator):
    """A BaseSensorOperator subclass: done on its ``need``-th poke."""

    def __init__(self, *, need, **kwargs):
        super().__init__(**kwargs)
        self.need = need

    def poke(self, context):
        return poked(self.task_id, context["run_id"]) >= self.need


with DAG("af_sensors", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")) as dag:

    @task.sensor(poke_interval=0.2, timeout=60, mode="reschedule")
    def ready(run_id=None) -> PokeReturnValue:
        n = poked("ready", run_id)
        return PokeReturnValue(is_done=n >= 3, xcom_value=f"ready after {n}")

    @task
    def use(value):
        return value

    counted = CountingSensor(task_id="counted", need=2, poke_interval=0.2, mode="poke")
    never = PythonSensor(
        task_id="never", python_callable=lambda: False, poke_interval=0.2, timeout=1, soft_fail=True
    )
    bash = BashSensor(task_id="bash", bash_command="exit 0", poke_interval=0.2)
    use(ready()) >> counted >> [never, bash]
