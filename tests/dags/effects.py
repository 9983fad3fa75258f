"""Test DAGs whose tasks leave countable side effects (marker files), for dedupe tests."""

import time

from _marks import MARKS, mark

from beatflow import DAG, task


@task(retries=0)
def effect(ctx) -> int:
    mark(f"start-{ctx.run_id}")
    time.sleep(ctx.params["sleep"])
    return mark(f"done-{ctx.run_id}")


@task
def downstream(n: int) -> int:
    return n + 100


@task(retries=1, retry_delay=0.1)
def fixable(ctx) -> str:
    mark(f"fixable-{ctx.run_id}")
    if not (MARKS / f"fix-{ctx.run_id}").exists():
        raise RuntimeError("not fixed yet")
    return "fixed"


with DAG("t_effect", params={"sleep": 0.0}):
    downstream(effect())


@task
def after_fix(value: str) -> str:
    return f"after {value}"


with DAG("t_fixable"):
    after_fix(fixable())
