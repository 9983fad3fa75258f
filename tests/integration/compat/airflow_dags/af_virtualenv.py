"""An Airflow DAG file whose callables run in virtual environments made for them: a fresh one
without the system's packages, and a cached one with a requirement (shared by two tasks, built
once; the wheel comes from a folder the test writes, no package index); one whose requirement pip
refuses."""

import os
from pathlib import Path

import pendulum
from airflow.providers.standard.operators.python import PythonVirtualenvOperator
from airflow.sdk import DAG, task

MARKS = Path(os.environ.get("BEATFLOW_TEST_MARKS", "/tmp/beatflow-test-marks"))
CACHE, WHEELS = MARKS / "venvs", MARKS / "wheels"
REQUIRED = {
    "requirements": ["beatflow-test-colours==1.0"],
    "pip_install_options": ["--no-index", "--find-links", str(WHEELS)],
    "venv_cache_path": str(CACHE),
}
START = pendulum.datetime(2021, 1, 1, tz="UTC")


def colours(word):
    """Runs in the cached environment: the required package is there."""
    import beatflow_test_colours

    return {"word": word, "colours": beatflow_test_colours.VERSION}


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
        op_args=["hi"],
        **REQUIRED,
    )

    @task.branch_virtualenv(**REQUIRED)
    def pick(result):
        import beatflow_test_colours

        return "chosen" if result["colours"] == beatflow_test_colours.VERSION else "other"

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
