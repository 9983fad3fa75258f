"""Sensors in reschedule mode on each broker (Redis and RabbitMQ): every poke is made once and
the sensor succeeds once; and on RabbitMQ a long wait between pokes is held in countdowns that
end well before RabbitMQ's consumer_timeout (a worker holds a countdown's message unacked, and
RabbitMQ closes the channel of a delivery unacked past 1,800 s by default)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from beatflow.execution.backoff import COUNTDOWN_MAX_SECONDS
from beatflow.runs import trigger_dag
from beatflow.runtime import runtime_of
from tests.cluster import Cluster, cluster
from tests.conftest import broker_env
from tests.procs import wait_for

pytestmark = pytest.mark.slow

RABBITMQ_CONSUMER_TIMEOUT = 1800.0  # RabbitMQ's default, in seconds


def pokes_recorded(c: Cluster, key: str) -> int:
    recorded = c.store.sensor_pokes(key)
    return 0 if recorded is None else recorded.poke_count


def test_a_rescheduled_sensor_makes_each_poke_once_and_succeeds_once_on_each_broker(
    request, tmp_path, redis_url, postgres_url, broker
):
    env = broker_env(request, broker, redis_url)
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        c.marks.mkdir(parents=True, exist_ok=True)
        run_id = trigger_dag(runtime_of(c.app), "t_sensor_counted").run_id
        key = f"t_sensor_counted/{run_id}/counted"
        wait_for(lambda: pokes_recorded(c, key) >= 2, timeout=60, message="two pokes")
        assert c.store.get_dag_run("t_sensor_counted", run_id).state == "running"
        (c.marks / f"ready-{run_id}").write_text("")
        final, tasks = c.wait("t_sensor_counted", run_id, timeout=60)
        assert final.state == "success", c.log_tail()
        assert tasks["counted"].result == "ready"
        assert tasks["counted"].try_number == 1  # reschedules consume no retry
        # each poke once: the ones that were not done (recorded), then the one that was
        assert c.count(f"poke-{run_id}") == pokes_recorded(c, key) + 1
        assert c.count(f"once-{run_id}") == 1


def _held_pokes(c: Cluster, name: str) -> list[dict[str, Any]] | None:
    """The messages with a countdown the workers hold for task ``name`` (Celery's
    ``inspect scheduled``), or None while there are none."""
    scheduled = c.app.control.inspect(timeout=2).scheduled() or {}
    held = [
        entry
        for entries in scheduled.values()
        for entry in entries
        if entry["request"]["name"] == name
    ]
    return held or None


def test_on_rabbitmq_an_hour_between_pokes_waits_in_countdowns_below_its_consumer_timeout(
    request, tmp_path, redis_url, postgres_url
):
    env = broker_env(request, "rabbitmq", redis_url)
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        c.marks.mkdir(parents=True, exist_ok=True)
        run_id = trigger_dag(runtime_of(c.app), "t_sensor_hourly").run_id
        key = f"t_sensor_hourly/{run_id}/hourly"
        wait_for(lambda: pokes_recorded(c, key) >= 1, timeout=60, message="the first poke")
        recorded = c.store.sensor_pokes(key)
        assert recorded is not None
        # the wait recorded is the hour; the message that wakes the sensor is not that far out
        assert (recorded.next_poke_at - recorded.first_poke_at).total_seconds() >= 3599
        held: Any = wait_for(
            lambda: _held_pokes(c, "t_sensor_hourly.hourly"),
            timeout=30,
            message="the worker to hold the next poke's message",
        )
        assert len(held) == 1 and held[0]["request"]["kwargs"]["poke"] == 2
        eta = datetime.fromisoformat(held[0]["eta"])
        eta = eta if eta.tzinfo is not None else eta.replace(tzinfo=UTC)
        assert eta <= recorded.next_poke_at
        ahead = (eta - datetime.now(UTC)).total_seconds()
        assert ahead <= COUNTDOWN_MAX_SECONDS <= RABBITMQ_CONSUMER_TIMEOUT / 2
        assert c.count(f"poke-{run_id}") == 1
