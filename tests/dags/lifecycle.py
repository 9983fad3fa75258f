"""Test DAGs for the run lifecycle: one run at a time, side effects to count, a chord whose
parts wait on gate files, a run that overstays its dagrun_timeout, a task on a queue no worker
serves."""

import os
import time
from datetime import timedelta

from _marks import MARKS, mark

from beatflow import DAG, task


@task(retries=0)
def step(ctx) -> int:
    # which process runs it, so a test can tell it was terminated (cancel --terminate)
    MARKS.mkdir(parents=True, exist_ok=True)
    (MARKS / f"pid-step-{ctx.run_id}").write_text(str(os.getpid()))
    mark(f"step-{ctx.run_id}")
    time.sleep(ctx.params["sleep"])
    return 1


with DAG("t_single", max_active_runs=1, params={"sleep": 0.0}):
    step()


def _wait_gate(ctx, name: str) -> None:
    gate = MARKS / f"gate-{ctx.run_id}-{name}"
    deadline = time.monotonic() + ctx.params["hold"]
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@task(retries=0)
def part(ctx, n: int) -> int:
    mark(f"part{n}-{ctx.run_id}")
    _wait_gate(ctx, str(n))
    return n


@task(retries=0)
def join(a: int, b: int, ctx) -> int:
    mark(f"join-{ctx.run_id}")
    return a + b


@task(retries=0)
def tail(total: int, ctx) -> int:
    mark(f"tail-{ctx.run_id}")
    return total * 10


with DAG("t_chord", params={"hold": 0.0}):
    tail(join(part.override(task_id="p1")(n=1), part.override(task_id="p2")(n=2)))


@task(retries=0)
def linger(ctx) -> str:
    mark(f"linger-{ctx.run_id}")
    _wait_gate(ctx, "linger")
    mark(f"lingered-{ctx.run_id}")
    return "done"


@task(retries=0)
def after_linger(value: str, ctx) -> str:
    mark(f"after-{ctx.run_id}")
    return value


with DAG("t_linger", dagrun_timeout=timedelta(seconds=4), params={"hold": 60.0}):
    after_linger(linger())


@task(retries=0, queue="nobody-serves-this")
def stranded() -> int:
    return 1


with DAG("t_stranded"):
    stranded()


@task(retries=1, retry_delay=20.0, retry_jitter=False)
def flaky_once(ctx) -> str:
    if mark(f"flaky-{ctx.run_id}") == 1:
        raise RuntimeError("first try fails")
    return "second try"


with DAG("t_slow_retry"):
    flaky_once()


@task(retries=0)
def held(ctx) -> str:
    mark(f"held-{ctx.run_id}")
    _wait_gate(ctx, "held")
    return "held"


@task(retries=0, trigger_rule="all_done")
def after_all_done(value: str, ctx) -> str:
    mark(f"after-all-done-{ctx.run_id}")
    return "ran"


with DAG("t_cancel_all_done", params={"hold": 30.0}):
    after_all_done(held())
