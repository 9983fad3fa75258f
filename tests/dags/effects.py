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


@task(retries=2, retry_delay=0.1, retry_jitter=False)
def flaky(ctx) -> str:
    # counts every try across rounds (a clear or a replay starts a new round of three)
    mark(f"flaky-{ctx.run_id}")
    if not (MARKS / f"fix-{ctx.run_id}").exists():
        raise RuntimeError(f"not fixed yet (try {ctx.try_number})")
    return "fixed"


@task
def after_flaky(value: str) -> str:
    return f"after {value}"


with DAG("t_retried"):
    after_flaky(flaky())
