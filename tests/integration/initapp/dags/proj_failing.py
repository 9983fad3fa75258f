"""A DAG whose task fails: Celery (its events, Flower) records the task as FAILURE."""

from datetime import datetime

from beatflow import DAG, task


@task
def boom() -> None:
    raise ValueError("the project's task failed")


with DAG("proj_failing", schedule=None, start_date=datetime(2026, 1, 1)):
    boom()
