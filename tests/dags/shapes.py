"""Test DAGs: a non-series-parallel DAG (a->c, b->c, b->d) and a wide one."""

import time

from beatflow import DAG, task


@task
def stamp(name: str, seconds: float = 0.05) -> float:
    time.sleep(seconds)
    return time.time()


@task
def after(name: str, *ups: float) -> float:
    time.sleep(0.05)
    return time.time()


with DAG("t_nsp"):
    a = stamp.override(task_id="a")("a")
    # b outlasts a: without the plan's barrier a worker would take c (after a) while b runs
    b = stamp.override(task_id="b")("b", 1.0)
    c = after.override(task_id="c")("c", a, b)
    d = after.override(task_id="d")("d", b)

with DAG("t_wide"):

    @task
    def noop(i: int) -> int:
        return i

    @task
    def count(xs: list[int]) -> int:
        return len(xs)

    first = noop.override(task_id="first")(0)
    mids = [noop.override(task_id=f"m{i}")(i) for i in range(150)]
    count(mids)
    for m in mids:
        first >> m
