"""A DAG the live-view browser tests hold open with gate files (the test creates them): a map
whose instances wait for their gate, then a task that fails its first try with a long log line
and a long reason, and waits for its gate on the second try."""

import logging
import time

from beatflow import DAG, task
from tests.dags._marks import MARKS, mark

log = logging.getLogger("web_live")
GATE_SECONDS = 120.0
LONG = "a long log line " * 40


def wait_gate(name: str) -> None:
    """Wait for the test to open this gate (the file exists); give up after two minutes."""
    gate = MARKS / name
    deadline = time.monotonic() + GATE_SECONDS
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@task
def items() -> list[int]:
    return [0, 1]


@task
def step(i: int, ctx) -> int:
    log.info("instance %d waits for its gate", i)
    wait_gate(f"gate-{ctx.run_id}-map")
    return i * 10


@task
def collect(values: list[int]) -> int:
    return sum(values)


@task(retries=1, retry_delay=0.1)
def hold(n: int, ctx) -> int:
    calls = mark(f"hold-{ctx.run_id}")
    log.warning("%s END-OF-THE-LONG-LINE", LONG)
    if calls == 1:
        raise RuntimeError(f"{LONG} the retry reason: the disk was full")
    log.info("try %d waits for its gate", calls)
    wait_gate(f"gate-{ctx.run_id}-hold")
    log.info("the gate opened")
    return n


with DAG("web_live", description="a map and a retried task the live view tests hold open"):
    hold(collect(step.map(items())))
