"""A task fails and the broker refuses its retry message at that moment (Redis out of memory):
Celery would drop the message (Reject(requeue=False)); beatflow gives it back to the broker
instead, so the retry still happens and the run succeeds once the broker takes writes again."""

from __future__ import annotations

import pytest
import redis

from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests.cluster import cluster
from tests.procs import wait_for

pytestmark = pytest.mark.slow

FAST_REDELIVERY = {
    "BEATFLOW_VISIBILITY_TIMEOUT": "12",
    "BEATFLOW_TASK_SOFT_TIME_LIMIT": "9",
    "BEATFLOW_TASK_TIME_LIMIT": "10",
    "BEATFLOW_UNACKED_RESTORE_INTERVAL": "1",
}


def refused(broker: redis.Redis) -> int:
    """Commands Redis refused for lack of memory since its stats were reset."""
    return int(broker.info("errorstats").get("errorstat_OOM", {}).get("count", 0))


def in_flight(broker: redis.Redis) -> int:
    """Messages delivered to a worker and not acknowledged yet (kombu's unacked hash)."""
    keys = [k for k in broker.keys("*unacked") if k.decode().rsplit(":", 1)[-1] == "unacked"]
    return sum(int(broker.hlen(k)) for k in keys)


def test_a_retry_the_broker_refuses_is_given_back_not_dropped(tmp_path, own_redis, postgres_url):
    with cluster(tmp_path, own_redis.url, postgres_url, env=FAST_REDELIVERY) as c:
        record = trigger_dag(runtime_of(c.app), "t_fails_once")
        run_id = record.run_id
        wait_for(lambda: c.count(f"fails-once-{run_id}") == 1, message="the first try to start")
        broker = redis.Redis.from_url(own_redis.url)
        broker.config_set("maxmemory-policy", "noeviction")
        broker.config_resetstat()
        broker.config_set("maxmemory", 1)  # every write command is refused from now on
        try:
            (c.marks / f"go-{run_id}").write_text("")  # the first try fails now
            wait_for(
                lambda: c.tasks("t_fails_once", run_id)["fails_once"].state == "up_for_retry",
                timeout=60,
                message="the failure to be recorded",
            )
            # keep refusing until the worker is done with the message: it said it gave the message
            # back, or the message left the broker (dropped: what Celery alone would do)
            wait_for(
                lambda: (
                    refused(broker) >= 1
                    and ("could not publish the retry" in c.log() or not in_flight(broker))
                ),
                timeout=90,
                message="the refused retry to be handled",
            )
        finally:
            broker.config_set("maxmemory", 0)
        final, tasks = c.wait("t_fails_once", run_id, timeout=120)
        assert final.state == "success"
        assert tasks["fails_once"].try_number == 2
        assert c.count(f"fails-once-{run_id}") == 2
        assert "could not publish the retry" in c.log()  # the path under test was taken
        broker.close()
