"""Test DAG for the broker refusing writes: one task and nothing after it, so a run in flight
needs no publish to finish, held until the test opens its gate."""

import time

from _marks import MARKS, mark

from beatflow import DAG, task


@task(retries=0)
def gated(ctx) -> int:
    mark(f"gated-{ctx.run_id}")
    gate = MARKS / f"gate-{ctx.run_id}"
    deadline = time.monotonic() + ctx.params["hold"]
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return 1


with DAG("t_gated", params={"hold": 0.0}):
    gated()
