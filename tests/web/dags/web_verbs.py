"""A DAG the browser tests of the operator's verbs drive: a task with ``retries=2`` that fails
until its ``succeed_on``-th call (counted across clears and replays), then a downstream task."""

import logging

from beatflow import DAG, Param, task
from tests.dags._marks import mark

log = logging.getLogger("web_verbs")


@task(retries=2, retry_delay=0.1, retry_jitter=False)
def flaky(ctx) -> int:
    calls = mark(f"flaky-{ctx.run_id}")
    log.warning("flaky call %d (try %d)", calls, ctx.try_number)
    if calls < ctx.params["succeed_on"]:
        raise RuntimeError(f"flaky call {calls} fails")
    return calls


@task
def report(calls: int) -> str:
    return f"succeeded on call {calls}"


with DAG("web_verbs", params={"succeed_on": Param(default=6, type=int)}):
    report(flaky())
