"""RabbitMQ as the broker: a beatflow worker consumes from it, runs DAGs to success (their maps
too) and keeps beatflow's own state in Redis (BEATFLOW_REDIS_URL)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import procs
from tests.cluster import cluster
from tests.conftest import broker_env
from tests.services import free_port

pytestmark = pytest.mark.slow


def test_a_dag_with_a_map_runs_to_success_with_rabbitmq_as_the_broker(
    request, tmp_path, redis_url, postgres_url, rabbitmq_server
):
    env = broker_env(request, "rabbitmq", redis_url)
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        assert c.app.conf.broker_url.startswith("amqp://")
        with c.app.connection_for_write() as conn:
            assert conn.transport.driver_type == "amqp"
        final, tasks = c.run("t_map")
        assert final.state == "success", c.log_tail()
        assert [tasks[f"square[{i}]"].result for i in range(3)] == [1, 4, 9]
        assert tasks["collect"].result["values"] == [1, 4, 9]
        # the queue: durable, classic, with priorities (a task's priority= 0-9)
        queue = rabbitmq_server.queues()[c.env["BEATFLOW_QUEUES"]]
        assert queue["durable"] is True and queue["type"] == "classic"
        assert queue["arguments"] == {"x-max-priority": 10}


def test_quorum_queues_by_a_setting_run_a_map_and_retries_with_countdowns(
    request, tmp_path, redis_url, postgres_url, rabbitmq_server
):
    env = {**broker_env(request, "rabbitmq", redis_url), "BEATFLOW_RABBITMQ_QUORUM_QUEUES": "1"}
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        final, tasks = c.run("t_map")
        assert final.state == "success", c.log_tail()
        assert tasks["collect"].result["values"] == [1, 4, 9]
        # the retries wait out their countdowns in RabbitMQ (native delayed delivery)
        final, tasks = c.run("t_retry")
        assert final.state == "success", c.log_tail()
        assert tasks["flaky"].try_number == 3
        queue = rabbitmq_server.queues()[c.env["BEATFLOW_QUEUES"]]
        assert queue["durable"] is True and queue["type"] == "quorum"
        assert "x-max-priority" not in queue["arguments"]  # (RabbitMQ would refuse it)
        # (and a consumer with global QoS is refused on a quorum queue: the worker took none)


def _health(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "beatflow"), "health", *args, "--timeout", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        env=procs.beatflow_env({**env, "BEATFLOW_LOG_FORMAT": "text"}),
        check=False,
    )


def test_the_worker_probe_reaches_rabbitmq_and_redis_and_says_which_one_is_down(
    request, tmp_path, redis_url, postgres_url
):
    env = broker_env(request, "rabbitmq", redis_url)
    with cluster(tmp_path, redis_url, postgres_url, env=env) as c:
        node = f"{c.workers[0].name}@{socket.gethostname()}"
        ok = _health(c.env, "worker", "--node", node)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert f"worker {node} answered ping" in ok.stdout
    dead = f"amqp://guest:secretpw@127.0.0.1:{free_port()}//"
    down = _health({**env, "BEATFLOW_BROKER_URL": dead}, "worker", "--node", node)
    assert down.returncode == 1
    assert "unhealthy: RabbitMQ at amqp://guest:****@127.0.0.1" in down.stdout
    assert "secretpw" not in down.stdout + down.stderr
    no_redis = {**env, "BEATFLOW_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    down = _health(no_redis, "worker", "--node", node)
    assert down.returncode == 1 and "unhealthy: Redis at redis://127.0.0.1" in down.stdout
