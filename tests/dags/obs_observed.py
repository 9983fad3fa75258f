"""Test DAGs for the exporter: one retry then success, one final failure (with per-task
callbacks), a DAG with an SLA and callback, a DAG whose task holds its worker slot until
released, and a DAG whose task has a short time limit."""

import logging
import os
import time
from datetime import timedelta
from pathlib import Path

from beatflow import DAG, task

MARKS = Path(os.environ.get("BEATFLOW_TEST_MARKS", "/tmp/beatflow-test-marks"))
log = logging.getLogger("obs_observed")


def mark(name: str, text: str = "x") -> int:
    """Count calls across processes by appending to a file."""
    MARKS.mkdir(parents=True, exist_ok=True)
    path = MARKS / name
    with open(path, "a") as f:
        f.write(text)
    return len(path.read_text())


def on_retry(**info: object) -> None:
    mark(f"on_retry-{info['task_id']}")


def on_failure(**info: object) -> None:
    mark(f"on_failure-{info['task_id']}")


def on_sla_miss(**info: object) -> None:
    mark(f"sla-{info['dag_id']}", f"{info['run_id']}\n")


@task(retries=1, retry_delay=0.1, retry_jitter=False, on_retry=on_retry, on_failure=on_failure)
def retried_once(ctx) -> str:
    log.info("retried_once try %s", ctx.try_number)
    if mark(f"retried_once-{ctx.run_id}") < 2:
        raise ConnectionError("first try fails")
    return "ok"


@task(on_retry=on_retry, on_failure=on_failure)
def fails(ctx) -> None:
    ctx.log.info("about to fail")
    raise ValueError("fails on purpose")


@task
def quick() -> str:
    return "done"


@task
def blocked() -> str:
    """Holds its worker slot until the test writes the release mark (at most 60 s)."""
    release = MARKS / "release-blocked"
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "released"


@task(time_limit=2, soft_time_limit=1)
def limited() -> str:
    return "never run by the tests"


with DAG("obs_counts"):
    retried_once()
    fails()

with DAG("obs_sla", sla=timedelta(seconds=1), on_sla_miss=on_sla_miss):
    quick()

with DAG("obs_block"):
    blocked()

with DAG("obs_stuck"):
    limited()
