"""A worker whose broker is a real Redis Sentinel set (``BEATFLOW_BROKER_URL=sentinel://...``)
rides out the master refusing writes (maxmemory 1: "OOM command not allowed") like a worker on
a plain redis:// broker does. Stock kombu's SentinelTransport counts redis-py's OutOfMemoryError
among the channel errors: the first refused ack stopped the worker with "Unrecoverable error:
server:OutOfMemoryError"."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from beatflow.states import DagRunState
from tests.cluster import cluster
from tests.faults.execution.test_worker_rides_out_redis_oom import alive, unsettled
from tests.procs import wait_for
from tests.services._base import ServiceError
from tests.services.sentinel_set import SentinelSet, start_sentinel_set

pytestmark = pytest.mark.slow


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    try:
        with start_sentinel_set(tmp_path / "sentinel") as sset:
            yield sset
    except ServiceError as exc:
        pytest.skip(str(exc))


def test_a_worker_on_a_sentinel_broker_rides_out_the_master_refusing_writes(
    tmp_path: Path, sentinel_set: SentinelSet, make_postgres_db: Callable[[], str]
) -> None:
    with cluster(tmp_path, sentinel_set.url, make_postgres_db(), workers=0) as c:
        # one slot: run "a" runs, run "b" waits in the queue until "a" is acked
        worker = c.start_worker(concurrency=1)
        pid = worker.pid
        runs = [
            trigger_dag(runtime_of(c.app), "t_gated", run_id=f"sent-{n}", conf={"hold": 60.0})
            for n in "ab"
        ]
        wait_for(lambda: c.count("gated-sent-a") == 1, timeout=60, message="run a's task")
        master = sentinel_set.master()
        master.config_set("maxmemory-policy", "noeviction")
        master.config_set("maxmemory", 1)  # the master refuses every write from now on
        try:
            for n in "ab":
                (c.marks / f"gate-sent-{n}").write_text("")  # "a" finishes now, "b" when it runs
            # refuse until the worker met the refusal (the ack of "a", then the unacked record
            # of "b") and Celery retried the connection twice; stock kombu died at the ack
            wait_for(
                lambda: not alive(worker) or worker.log().count("Trying again in") >= 2,
                timeout=60,
                message="the worker to retry the broker twice",
            )
            assert c.count("gated-sent-b") == 0  # "b" waits: held by the worker, not run
        finally:
            master.config_set("maxmemory", 0)
        assert alive(worker) and worker.pid == pid, worker.log()[-3000:]
        for record in runs:
            final, tasks = c.wait("t_gated", record.run_id, timeout=60)
            assert final.state == DagRunState.SUCCESS
            assert tasks["gated"].try_number == 1
            assert c.count(f"gated-{record.run_id}") == 1  # ran once
        wait_for(
            lambda: not unsettled(master, c.env["BEATFLOW_QUEUES"]),
            timeout=30,
            message="every message acked",
        )
        assert alive(worker) and worker.pid == pid, worker.log()[-3000:]
        log = worker.log()
        assert "Unrecoverable error" not in log
        assert "1 held message(s) given back to their queues, 1 ack(s) written" in log
        assert "not running it again" not in log  # neither message came back a second time
        master.close()
