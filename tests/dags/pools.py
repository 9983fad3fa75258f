"""Test DAGs whose tasks share pools: each task journals its entry and exit (one appended line
each, in the order they happen across worker processes) so a test can measure how many held a
pool at once; ``release-<run_id>`` marker files let a test hold tasks inside their slots."""

import os
import time

from _marks import MARKS, mark

from beatflow import DAG, task


def journal(pool: str, sign: str, key: str) -> None:
    MARKS.mkdir(parents=True, exist_ok=True)
    fd = os.open(MARKS / f"journal-{pool}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{sign} {key}\n".encode())  # one write(2) with O_APPEND: never interleaved
    finally:
        os.close(fd)


def hold(ctx, pool: str) -> str:
    key = f"{ctx.run_id}/{ctx.task_id}"
    journal(pool, "+", key)
    mark(f"start-{ctx.run_id}")
    deadline = time.monotonic() + float(ctx.params.get("hold", 1.0))
    # held until released (a test holding the slot) or for the DAG's hold time
    while time.monotonic() < deadline and not (MARKS / f"release-{ctx.run_id}").exists():
        time.sleep(0.05)
    journal(pool, "-", key)
    mark(f"done-{ctx.run_id}")
    return key


@task(pool="t_shared")
def shared(i: int, ctx) -> str:
    return hold(ctx, "t_shared")


for dag_id in ("t_pool_a", "t_pool_b"):
    with DAG(dag_id, params={"hold": 1.0}):
        for i in range(5):
            shared(i)


@task(pool="t_double", pool_slots=2)
def double(i: int, ctx) -> str:
    return hold(ctx, "t_double")


with DAG("t_pool_double", params={"hold": 1.0}):
    for i in range(4):
        double(i)


@task(pool="t_held")
def held(i: int, ctx) -> str:
    return hold(ctx, "t_held")


with DAG("t_pool_held", params={"hold": 120.0}):
    for i in range(4):
        held(i)


@task(pool="t_nowhere")
def nowhere() -> str:
    return "never"


with DAG("t_pool_missing"):
    nowhere()
