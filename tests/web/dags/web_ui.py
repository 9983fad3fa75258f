"""DAGs the web UI tests drive: a small ETL whose last task fails on its first call (so a clear
makes it succeed), a slow DAG to cancel, and a DAG that dead-letters."""

import logging
import time

from beatflow import DAG, Param, task
from tests.dags._marks import mark

log = logging.getLogger("web_ui")


@task
def extract(ctx) -> list[int]:
    ctx.log.info("extracting %d rows for %s", ctx.params["rows"], ctx.run_id)
    return list(range(ctx.params["rows"]))


@task
def total(rows: list[int]) -> int:
    log.info("adding %d numbers", len(rows))
    return sum(rows)


@task(retries=0)
def publish(n: int, ctx) -> int:
    calls = mark(f"publish-{ctx.run_id}")
    log.warning("publish call %d with total %d", calls, n)
    if calls == 1 and ctx.params["fail_first"]:
        raise RuntimeError("the first publish fails on purpose")
    return n


with DAG(
    "web_etl",
    schedule="30 2 * * *",
    params={"rows": Param(default=3, type=int), "fail_first": Param(default=False, type=bool)},
    description="extract, total, publish",
    tags=["web", "etl"],
):
    publish(total(extract()))


@task
def slow(ctx) -> str:
    deadline = time.monotonic() + ctx.params["seconds"]
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return "slept"


with DAG("web_slow", params={"seconds": 60.0}):
    slow()


@task(retries=1, retry_delay=0.1)
def doomed(ctx) -> str:
    if mark(f"doomed-{ctx.run_id}") <= 2:
        log.error("doomed try fails")
        raise ValueError("doomed until replayed")
    return "replayed fine"


with DAG("web_dlq"):
    doomed()
