"""Test DAGs for the node wrapper's edge cases: a result that looks like a map expansion, a
dedupe key shared across runs, an error message with a NUL byte, a task held until the test
releases it (lease takeover), a task that fails once (retry publish)."""

import time

from _marks import MARKS, mark

from beatflow import DAG, task


@task
def looks_like_a_map() -> dict:
    return {"map_count": 3}


@task
def receives(value: dict) -> dict:
    return {"got": value}


with DAG("t_map_marker"):
    receives(looks_like_a_map())


@task(dedupe_key="{dag_id}/{params[customer]}/{task_id}", retries=0)
def charge(ctx) -> str:
    mark(f"charge-{ctx.params['customer']}")
    return f"charged {ctx.params['customer']} in {ctx.run_id}"


@task
def receipt(charged: str) -> str:
    return f"receipt: {charged}"


with DAG("t_customer", params={"customer": "nobody"}):
    receipt(charge())


@task(retries=0)
def nul_error() -> None:
    raise ValueError("bad byte \x00 here")


with DAG("t_nul"):
    nul_error()


def _wait_for(path, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@task(retries=0)
def held(ctx) -> int:
    mark(f"held-start-{ctx.run_id}")
    _wait_for(MARKS / f"release-{ctx.run_id}")
    if ctx.params.get("fail"):
        raise RuntimeError("failing after the lease was taken over")
    return 1


@task
def after_held(n: int) -> int:
    return n + 1


with DAG("t_stale", params={"fail": False}):
    after_held(held())


@task(retries=1, retry_delay=0.1)
def fails_once(ctx) -> str:
    calls = mark(f"fails-once-{ctx.run_id}")
    if calls == 1:
        _wait_for(MARKS / f"go-{ctx.run_id}")
        raise RuntimeError("first try fails")
    return f"ok on call {calls}"


with DAG("t_fails_once"):
    fails_once()
