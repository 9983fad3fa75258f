"""Task groups: an `extract` group per source (a @task_group called twice), a `transform` group
with a nested `quality` group and its own retries, and `group >> task` ordering."""

from beatflow import DAG, TaskGroup, task, task_group


@task
def list_orders(source: str) -> list[int]:
    return [1, 2, 3] if source == "shop" else [10, 20]


@task
def normalise(order: int) -> int:
    return order * 100


@task
def merge(shop: list[int], market: list[int]) -> list[int]:
    return sorted(shop + market)


@task
def not_empty(rows: list[int]) -> int:
    assert rows, "no rows"
    return len(rows)


@task
def no_duplicates(rows: list[int]) -> bool:
    return len(set(rows)) == len(rows)


@task
def publish(rows: list[int]) -> int:
    return sum(rows)


@task
def announce() -> str:
    return "published"


@task_group
def extract(source: str) -> list[int]:
    """List a source's orders and normalise each (one task run per order)."""
    return normalise.map(list_orders(source))


with DAG("example_task_groups", schedule=None, tags=["example"]):
    shop = extract.override(group_id="shop")("shop")
    market = extract.override(group_id="market")("market")
    with TaskGroup("transform", default_args={"retries": 2}) as transform:
        rows = merge(shop, market)
        with TaskGroup("quality"):
            not_empty(rows)
            no_duplicates(rows)
    total = publish(rows)
    transform >> total >> announce()
