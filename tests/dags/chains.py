"""Test DAGs: data passing along a chain, into a fan-in, through a mapping; order-only edges."""

import logging

from beatflow import DAG, task

log = logging.getLogger("chains")


@task
def numbers() -> list[int]:
    return [1, 2, 3]


@task
def double(xs: list[int]) -> list[int]:
    return [2 * x for x in xs]


@task
def total(xs: list[int]) -> int:
    return sum(xs)


@task
def left() -> str:
    return "L"


@task
def right() -> str:
    return "R"


@task
def join(a: str, b: str, c: int) -> str:
    log.info("joining %s, %s and %d", a, b, c)
    return f"{a}{b}{c}"


@task
def square(x: int) -> int:
    return x * x


@task
def collect(xs: list[int], ctx) -> dict:
    return {"values": xs, "dedupe_key": ctx.dedupe_key, "params": dict(ctx.params)}


with DAG("t_chain", params={"scale": 1}):
    t = total(double(numbers()))
    join(left(), right(), t)

with DAG("t_map"):
    collect(square.map(numbers()))


@task
def share(x: int, xs: list[int], scale: list[int]) -> float:
    return x * scale[0] / sum(xs)


with DAG("t_map_whole"):  # the instances also take the whole list it maps over
    src = numbers()
    collect(share.map(src, src, scale=numbers.override(task_id="scale")()))

with DAG("t_map_empty"):
    collect(square.map(double.override(task_id="empty_list")([])))


@task
def many() -> list[int]:
    return list(range(150))


@task
def tally(xs: list[int], tag: str) -> dict:
    return {"n": len(xs), "sum": sum(xs), "tag": tag}


with DAG("t_map_wide"):  # three chunks of instances, in a fan-in with another branch
    tally(square.map(many()), left())
