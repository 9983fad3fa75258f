"""DAG files the browser tests of issue 45's cases (test_browser_cases.py) write into their
dags folder, some while the stack runs: the tests see them reach the web app and the workers."""

from __future__ import annotations

WORKER_SIDE = "BF_CASES_WORKER_SIDE"  # set for the worker processes only

LATE_DAG = """
from beatflow import DAG, task


@task
def first() -> int:
    return 20


@task
def second(x: int) -> int:
    return x + 1


with DAG("case_late"):
    second(first())
"""

# Loads in the test process (the web app shows and triggers it) but not on the worker.
NEVER_DAG = f"""
import os

from beatflow import DAG, task

if os.environ.get("{WORKER_SIDE}"):
    raise ImportError("the worker lacks a package this DAG needs: " + "x" * 200 + " END-OF-REASON")


@task
def only() -> int:
    return 1


with DAG("case_never"):
    only()
"""

# early's first try fails once late has started, so its second try starts after late's: rows
# drawn by start time would swap; the page keeps the DAG's order (early, late, join).
ROWS_DAG = """
import time

from beatflow import DAG, task
from tests.dags._marks import count, mark


@task(retries=1, retry_delay=0.1, retry_jitter=False)
def early(ctx) -> int:
    if mark(f"early-{ctx.run_id}") == 1:
        deadline = time.monotonic() + 60
        while not count(f"late-{ctx.run_id}") and time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError("the first try fails once late has started")
    return 1


@task
def late(ctx) -> int:
    mark(f"late-{ctx.run_id}")
    return 2


@task
def join(a: int, b: int) -> int:
    return a + b


with DAG("case_rows", params={"note": "", "blob": ""}):
    join(early(), late())
"""
