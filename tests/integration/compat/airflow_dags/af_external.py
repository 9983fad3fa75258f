"""An Airflow DAG file whose callables run in another Python interpreter (the base interpreter
of the worker's virtual environment: no beatflow, no Celery there), their arguments and results
crossing as JSON; and one whose external tasks fail, each for a reason it names."""

import os
import sys

import pendulum
from airflow.providers.standard.operators.python import ExternalPythonOperator
from airflow.sdk import DAG, task

PYTHON = os.path.join(sys.base_prefix, "bin", "python3")
START = pendulum.datetime(2021, 1, 1, tz="UTC")


def where(x, y, ds=None, params=None):
    """Runs in PYTHON: says where it ran and what it got."""
    import importlib.util
    import sys

    print(f"running in {sys.executable}")
    return {
        "executable": sys.executable,
        "celery": importlib.util.find_spec("celery") is not None,
        "sum": x + y,
        "ds": ds,
        "n": params["n"],
    }


with DAG("af_external", schedule=None, start_date=START, params={"n": 3}) as dag:
    ext = ExternalPythonOperator(
        task_id="ext",
        python=PYTHON,
        python_callable=where,
        op_args=["{{ params.n }}"],
        op_kwargs={"y": "!"},
    )

    @task
    def words():
        return ["a", "b"]

    @task.external_python(python=PYTHON)
    def shout(items, run_id=None, **kwargs):
        return {"items": [i.upper() for i in items], "run_id": run_id, "ti": "ti" in kwargs}

    @task.branch_external_python(python=PYTHON)
    def pick(shouted):
        return "left" if shouted["items"] == ["A", "B"] else "right"

    @task
    def left():
        return "went left"

    @task
    def right():
        return "went right"

    ext >> pick(shout(words())) >> [left(), right()]


with DAG("af_external_errors", schedule=None, start_date=START) as errors_dag:

    @task.external_python(python="/nonexistent/bin/python3")
    def missing():
        return 1

    @task.external_python(python=PYTHON)
    def not_json():
        return {1, 2}

    @task.external_python(python=PYTHON)
    def raises():
        raise ValueError("no such thing")

    @task.external_python(python=PYTHON)
    def given(value):
        return value

    missing()
    not_json()
    raises()
    given({3, 4})
