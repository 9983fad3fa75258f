"""A worker rides out its Redis refusing writes ("OOM command not allowed when used memory >
'maxmemory'") like it rides out a lost connection. Stock kombu counts redis-py's OutOfMemoryError
among the channel errors, which Celery's consumer does not retry: the first ack Redis refused
stopped the worker with "Unrecoverable error: server:OutOfMemoryError" (nine workers in the
2026-12-01 chaos run). beatflow's Redis transport retries it as a lost connection, holds the
message it took off the queue while Redis refused to record it, and writes the refused ack later."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState
from tests.cluster import Cluster, cluster
from tests.procs import Proc, wait_for
from tests.services import OwnedRedis

pytestmark = pytest.mark.slow


def alive(worker: Proc) -> bool:
    return worker.popen is not None and worker.popen.poll() is None


def unsettled(broker: redis.Redis, queue: str) -> int:
    """Messages still queued, or delivered and not acked (kombu's unacked hash): a message
    left there would come back after the visibility timeout."""
    queued = sum(
        int(broker.llen(k)) for k in broker.scan_iter(f"{queue}*") if broker.type(k) == b"list"
    )
    return queued + int(broker.hlen("unacked"))


def rides_out_refused_writes(c: Cluster, broker: redis.Redis, prefix: str) -> str:
    """Two gated runs on a worker of one slot: "a" runs, "b" waits in the queue until "a" is
    acked. ``broker`` refuses every write while "a" finishes and "b" is taken; the same worker
    (never restarted) ends both runs, each task run once, every message acked. The worker's log."""
    worker = c.start_worker(concurrency=1)
    pid = worker.pid
    runs = [
        trigger_dag(runtime_of(c.app), "t_gated", run_id=f"{prefix}-{n}", conf={"hold": 60.0})
        for n in "ab"
    ]
    wait_for(lambda: c.count(f"gated-{prefix}-a") == 1, timeout=60, message="run a's task")
    broker.config_set("maxmemory-policy", "noeviction")
    broker.config_set("maxmemory", 1)  # every write command is refused from now on
    try:
        for n in "ab":
            (c.marks / f"gate-{prefix}-{n}").write_text("")  # "a" finishes now, "b" when it runs
        # refuse until the worker met the refusal (the ack of "a", then the unacked record of
        # "b" it took off the queue) and Celery retried the connection twice, with backoff;
        # before the fix (and with stock kombu) the worker died at the ack
        wait_for(
            lambda: not alive(worker) or worker.log().count("Trying again in") >= 2,
            timeout=60,
            message="the worker to retry the broker twice",
        )
        assert c.count(f"gated-{prefix}-b") == 0  # "b" waits: held by the worker, not run
    finally:
        broker.config_set("maxmemory", 0)
    assert alive(worker) and worker.pid == pid, worker.log()[-3000:]
    for record in runs:
        final, tasks = c.wait("t_gated", record.run_id, timeout=60)
        assert final.state == DagRunState.SUCCESS
        assert tasks["gated"].try_number == 1
        assert c.count(f"gated-{record.run_id}") == 1  # ran once
    wait_for(
        lambda: not unsettled(broker, c.env["BEATFLOW_QUEUES"]),
        timeout=30,
        message="every message acked",
    )
    assert alive(worker) and worker.pid == pid, worker.log()[-3000:]
    log = worker.log()
    assert "Unrecoverable error" not in log
    assert "1 held message(s) given back to their queues, 1 ack(s) written" in log
    assert "not running it again" not in log  # neither message came back a second time
    return log


def test_a_worker_rides_out_redis_refusing_writes_while_a_dag_run_is_in_flight(
    tmp_path: Path, own_redis: OwnedRedis, postgres_url: str
) -> None:
    with cluster(tmp_path, own_redis.url, postgres_url, workers=0) as c:
        broker = redis.Redis.from_url(own_redis.url)
        log = rides_out_refused_writes(c, broker, "oom")
        assert "reconciler resumes" not in log  # nor needed the reconciler to finish
        broker.close()


def test_a_task_that_runs_through_the_refusal_finishes_once(
    tmp_path: Path, own_redis: OwnedRedis, postgres_url: str
) -> None:
    with cluster(tmp_path, own_redis.url, postgres_url, workers=0) as c:
        # two slots: "a" runs through the refusal, "b" finishes in it, "c" waits in the queue
        worker = c.start_worker(concurrency=2)
        pid = worker.pid
        runs = [
            trigger_dag(runtime_of(c.app), "t_gated", run_id=f"oom-{n}", conf={"hold": 90.0})
            for n in "abc"
        ]
        wait_for(
            lambda: c.count("gated-oom-a") == c.count("gated-oom-b") == 1,
            timeout=60,
            message="runs a and b to start",
        )
        broker = redis.Redis.from_url(own_redis.url)
        broker.config_set("maxmemory-policy", "noeviction")
        broker.config_set("maxmemory", 1)
        try:
            for n in "bc":
                (c.marks / f"gate-oom-{n}").write_text("")
            wait_for(
                lambda: not alive(worker) or worker.log().count("Trying again in") >= 2,
                timeout=60,
                message="the worker to retry the broker twice",
            )
        finally:
            broker.config_set("maxmemory", 0)
        assert alive(worker) and worker.pid == pid, worker.log()[-3000:]
        wait_for(lambda: c.count("gated-oom-c") == 1, timeout=60, message="run c's task")
        (c.marks / "gate-oom-a").write_text("")  # "a" finishes after the refusal
        for record in runs:
            final, tasks = c.wait("t_gated", record.run_id, timeout=60)
            assert final.state == DagRunState.SUCCESS
            assert tasks["gated"].try_number == 1
            assert c.count(f"gated-{record.run_id}") == 1
        wait_for(
            lambda: not unsettled(broker, c.env["BEATFLOW_QUEUES"]),
            timeout=30,
            message="every message acked",
        )
        assert alive(worker) and worker.pid == pid, worker.log()[-3000:]
        assert "Unrecoverable error" not in worker.log()
        broker.close()
