"""Test DAGs for the run lifecycle: one run at a time, side effects to count, a chord whose
body waits on a file, a run that overstays its dagrun_timeout."""

import time

from _marks import MARKS, mark

from beatflow import DAG, task


@task(retries=0)
def step(ctx) -> int:
    mark(f"step-{ctx.run_id}")
    time.sleep(ctx.params["sleep"])
    return 1


with DAG("t_single", max_active_runs=1, params={"sleep": 0.0}):
    step()


@task(retries=0)
def part(ctx, n: int) -> int:
    mark(f"part{n}-{ctx.run_id}")
    gate = MARKS / f"gate-{ctx.run_id}"
    deadline = time.monotonic() + ctx.params["hold"]
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return n


@task(retries=0)
def join(ctx, a: int, b: int) -> int:
    mark(f"join-{ctx.run_id}")
    return a + b


@task(retries=0)
def tail(ctx, total: int) -> int:
    mark(f"tail-{ctx.run_id}")
    return total * 10


with DAG("t_chord", params={"hold": 0.0}):
    tail(join(part.override(task_id="p1")(n=1), part.override(task_id="p2")(n=2)))
