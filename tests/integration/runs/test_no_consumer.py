"""`beatflow dags trigger --wait` on a run whose queue no worker consumes: a few seconds in, it
says so on stderr (which queue, how to start a worker on it) and goes on waiting; a worker on
the queue ends the wait as usual. A run that only waits its turn on a consumed queue (the one
worker busy) gets the same check and no such line. On Redis and on RabbitMQ."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests import procs
from tests.cluster import Cluster, cluster
from tests.conftest import broker_env

pytestmark = pytest.mark.slow

NO_CONSUMER = "no worker consumes queue"


@contextmanager
def _waiting(c: Cluster, dag_id: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`beatflow dags trigger DAG_ID --wait --json`, running; the path its output goes to. Killed
    on the way out if it still runs."""
    out = c.tmp / f"trigger-{dag_id}"
    popen = procs.start_beatflow(
        c.settings_env, out, "dags", "trigger", dag_id, "--wait", "--json", "--timeout", "300"
    )
    try:
        yield popen, out
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()


def _stderr(out: Path) -> str:
    return Path(f"{out}.stderr").read_text(errors="replace")


def _finished(popen: subprocess.Popen[bytes], out: Path) -> dict[str, object]:
    """The command's one JSON document, once it ended with exit code 0."""
    assert popen.wait(timeout=120) == 0, _stderr(out)
    doc: dict[str, object] = json.loads(Path(f"{out}.stdout").read_text())
    return doc


def test_a_wait_on_a_queue_no_worker_consumes_says_so_and_ends_once_one_does(
    request, broker, tmp_path, redis_url, postgres_url
):
    env = broker_env(request, broker, redis_url)
    with cluster(tmp_path, redis_url, postgres_url, env=env, workers=0) as c:
        queue = c.env["BEATFLOW_QUEUES"]
        elsewhere = procs.celery_worker(c.tmp, c.env, queues="other").start()
        c.workers.append(elsewhere)
        procs.wait_worker_ready(c.app, elsewhere)
        with _waiting(c, "t_chain") as (popen, out):
            said = procs.wait_for(
                lambda: [line for line in _stderr(out).splitlines() if NO_CONSUMER in line],
                60,
                message="the waiting command to say no worker consumes the queue",
            )
            assert popen.poll() is None  # still waiting
            [line] = said  # type: ignore[misc]
            assert f"'{queue}'" in line and f"celery -A beatflow worker -Q {queue}" in line
            c.start_worker()
            doc = _finished(popen, out)
    assert doc["state"] == "success"


def test_a_wait_behind_a_busy_worker_on_the_queue_asks_and_says_nothing(
    request, broker, tmp_path, redis_url, postgres_url
):
    env = broker_env(request, broker, redis_url)
    with cluster(tmp_path, redis_url, postgres_url, env=env, workers=0) as c:
        # one process, held by run "a"; debug logs show the worker asked for its queues
        debug = {**c.env, "BEATFLOW_LOG_LEVEL": "DEBUG"}
        worker = procs.celery_worker(c.tmp, debug, queues=c.env["BEATFLOW_QUEUES"], concurrency=1)
        c.workers.append(worker.start())
        procs.wait_worker_ready(c.app, worker)
        trigger_dag(runtime_of(c.app), "t_cancel_all_done", run_id="a", conf={"hold": 120.0})
        procs.wait_for(lambda: c.count("held-a"), 60, message="run a to hold the worker")
        with _waiting(c, "t_chain") as (popen, out):
            procs.wait_for(
                lambda: "active_queues" in worker.log() or popen.poll() is not None,
                60,
                message="the waiting command to ask the workers for their queues",
            )
            assert popen.poll() is None, _stderr(out)
            (c.marks / "gate-a-held").touch()  # run a ends: the worker takes the waiting run
            doc = _finished(popen, out)
    assert doc["state"] == "success"
    assert NO_CONSUMER not in _stderr(out)
