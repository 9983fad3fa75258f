"""DAGs the backfill tests drive: a daily DAG whose run for the 2nd of a month fails on its
first call (so a backfill with reprocess=failed makes it succeed), and a daily DAG whose task
takes a while (to see a backfill's own max_active_runs and to cancel one)."""

import time
from datetime import UTC, datetime

from beatflow import DAG, task
from tests.dags._marks import mark


@task(retries=0)
def day(ctx) -> str:
    calls = mark(f"bf-day-{ctx.run_id}")
    if calls == 1 and ctx.logical_date.day == 2:
        raise RuntimeError("the 2nd fails on its first call")
    return ctx.logical_date.date().isoformat()


with DAG("web_bf_daily", schedule="0 0 * * *", start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    day()


@task
def linger() -> str:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return "lingered"


with DAG("web_bf_slow", schedule="0 0 * * *", start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    linger()
