"""The DAG the project adds once beatflow is in its app: a fan-out (.map(), whose instances a
worker sends in one block through the project's app) and a join."""

from datetime import datetime

from beatflow import DAG, task


@task
def numbers() -> list[int]:
    return [1, 2, 3]


@task
def double(n: int) -> int:
    return 2 * n


@task
def total(values: list[int]) -> int:
    return sum(values)


with DAG("proj_pipeline", schedule=None, start_date=datetime(2026, 1, 1)):
    total(double.map(numbers()))
