"""The reconciler's high availability: of several processes, only the holder of the Redis lease
runs a pass; a holder that stops hands over at once, one that dies is replaced once its lease
lapses (three intervals)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from beatflow.runs.reconciler import LEASE_KEY, Reconciler
from beatflow.runtime import runtime_of
from tests.integration.runs.conftest import DAGS, make_app
from tests.procs import wait_for


@pytest.fixture
def fast_app(redis_url: str, postgres_url: str, queue: str) -> Iterator[Celery]:
    made = make_app(redis_url, postgres_url, queue, BEATFLOW_RECONCILE_INTERVAL="0.5")
    yield made
    made.close()


def test_only_the_lease_holder_runs_a_pass_and_a_dead_holder_is_replaced(
    fast_app: Celery, redis_url: str
) -> None:
    runtime = runtime_of(fast_app)
    first, second = Reconciler(runtime), Reconciler(runtime)
    assert first.tick() is not None  # took the lease, ran a pass
    assert second.tick() is None  # the lease is held
    assert first.tick() is not None  # renewed
    client = redis.Redis.from_url(redis_url)
    assert client.get(LEASE_KEY) == first.token.encode()
    # the holder dies without a word: the other takes over once the lease lapses
    wait_for(lambda: second.tick() is not None, timeout=30, message="the takeover")
    assert first.tick() is None
    second.stop()  # a clean stop hands the lease over at once
    assert first.tick() is not None


def test_a_pass_dispatches_a_queued_run_left_behind(fast_app: Celery) -> None:
    runtime = runtime_of(fast_app)
    runtime.store.create_dag_run("t_single", "left-behind", conf={"sleep": 0.0})
    report = Reconciler(runtime).tick()
    assert report is not None and report.dispatched == 1
    run = runtime.store.get_dag_run("t_single", "left-behind")
    assert run is not None and run.state == "running"


def test_beatflow_runs_reconcile_runs_one_pass_now(
    fast_app: Celery, redis_url: str, postgres_url: str, queue: str
) -> None:
    runtime_of(fast_app).store.create_dag_run("t_single", "by-hand", conf={"sleep": 0.0})
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    env.update(
        BEATFLOW_BROKER_URL=redis_url,
        BEATFLOW_DATABASE_URL=postgres_url,
        BEATFLOW_DAGS_FOLDER=str(DAGS),
        BEATFLOW_QUEUES=queue,
    )
    out = subprocess.run(
        [str(Path(sys.executable).with_name("beatflow")), "runs", "reconcile", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"dispatched": 1, "closed": [], "resumed": [], "failed": []}
