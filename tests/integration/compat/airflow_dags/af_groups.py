import json
import os
from pathlib import Path

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param, task
from airflow.utils.task_group import TaskGroup

MARKS = Path(os.environ.get("BEATFLOW_TEST_MARKS", "/tmp/beatflow-test-marks"))


def record(context):
    """An Airflow callback: reads the Airflow names of its context, writes one JSON line."""
    MARKS.mkdir(parents=True, exist_ok=True)
    ti = context["ti"]
    with open(MARKS / f"af-{context['dag_run'].run_id}.jsonl", "a") as f:
        f.write(json.dumps([context["event"], ti.task_id, context["exception"]]) + "\n")


with DAG(
    "af_groups",
    schedule="@once",
    start_date=pendulum.datetime(2021, 1, 1, tz="UTC"),
    params={"n": Param(2, type="integer", minimum=1)},
    default_args={"on_failure_callback": record},
    on_failure_callback=record,
) as dag:
    start = EmptyOperator(task_id="start")
    with TaskGroup("work") as work:

        @task
        def double(params=None):
            return params["n"] * 2

        fail = BashOperator(task_id="fail", bash_command="exit {{ params.n }}")
        double() >> fail
    start >> work >> EmptyOperator(task_id="end", on_success_callback=record)
