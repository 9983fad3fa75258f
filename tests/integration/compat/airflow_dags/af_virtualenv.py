"""An Airflow DAG file whose callables run in virtual environments made for them: a fresh one
without the system's packages, and a cached one with a requirement (shared by two tasks, built
once); one whose requirement pip refuses."""

import os
from pathlib import Path

import pendulum
from airflow.providers.standard.operators.python import PythonVirtualenvOperator
from airflow.sdk import DAG, task

CACHE = Path(os.environ.get("BEATFLOW_TEST_MARKS", "/tmp/beatflow-test-marks")) / "venvs"
START = pendulum.datetime(2021, 1, 1, tz="UTC")


def colours(word):
    """Runs in the cached environment: colorama is there."""
    import colorama

    return {"word": word, "colorama": colorama.__version__}


with DAG("af_virtualenv", schedule=None, start_date=START) as dag:

    @task.virtualenv(system_site_packages=False)
    def bare(n):
        import importlib.util
        import sys

        celery = importlib.util.find_spec("celery") is not None
        return {"prefix": sys.prefix, "celery": celery, "n": n}

    with_colours = PythonVirtualenvOperator(
        task_id="with_colours",
        python_callable=colours,
        requirements=["colorama==0.4.0"],
        venv_cache_path=str(CACHE),
        op_args=["hi"],
    )

    @task.branch_virtualenv(requirements=["colorama==0.4.0"], venv_cache_path=str(CACHE))
    def pick(result):
        import colorama

        return "chosen" if result["colorama"] == colorama.__version__ else "other"

    @task
    def chosen():
        return "chosen"

    @task
    def other():
        return "other"

    bare(2) >> with_colours
    pick(with_colours.output) >> [chosen(), other()]


with DAG("af_virtualenv_errors", schedule=None, start_date=START) as errors_dag:

    @task.virtualenv(requirements=["colorama === not a version"])
    def refused():
        return 1

    refused()
