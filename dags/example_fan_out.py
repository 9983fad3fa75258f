"""Dynamic fan-out/fan-in: list the partitions at run time, process each in parallel
(one task run per partition), then combine the list of results."""

from beatflow import DAG, task


@task
def list_partitions(ctx) -> list[int]:
    return list(range(ctx.params["partitions"]))


@task(retries=1)
def process(partition: int) -> int:
    return partition * partition


@task
def combine(squares: list[int]) -> int:
    return sum(squares)


with DAG("example_fan_out", schedule=None, params={"partitions": 8}, tags=["example"]):
    combine(process.map(list_partitions()))
