"""Pools: two loads and a heavy rebuild share the `warehouse` pool, so however many workers
run, at most its slots of warehouse work run at once (the rebuild takes 2). Create the pool
first (`beatflow pools set warehouse 2`): as in Airflow, a task whose pool does not exist
fails with the reason. Tasks without a pool (`summarise`) are not limited."""

from beatflow import DAG, task


@task(pool="warehouse")
def load(table: str) -> str:
    return f"loaded {table}"


@task(pool="warehouse", pool_slots=2)
def rebuild_marts(loaded: list[str]) -> int:
    return len(loaded)


@task
def summarise(marts: int) -> str:
    return f"{marts} tables behind the marts"


with DAG("example_pools", schedule=None, tags=["example"]):
    tables = [load.override(task_id=f"load_{t}")(t) for t in ("orders", "customers")]
    summarise(rebuild_marts(tables))
