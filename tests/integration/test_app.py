"""The Celery app as `celery -A beatflow` loads it, against a real worker subprocess: it answers
`celery -A beatflow inspect ping`, and it refuses a pickled message without running anything while
the same task sent as JSON runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import kombu
import pytest
import redis

from tests import services

pytestmark = pytest.mark.slow

PROBE_TASK = "bf_probe.write_marker"
PROBE_MODULE = '''
"""A task the worker imports with -I, to show which messages run."""
from pathlib import Path

from beatflow.app import get_app

app = get_app()


@app.task(name="bf_probe.write_marker")
def write_marker(path: str) -> str:
    Path(path).write_text("ran")
    return path
'''


@dataclass
class WorkerProcess:
    node: str
    queue: str
    broker_url: str
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, *needles: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log()
            if all(n in text for n in needles):
                return text
            assert self.process.poll() is None, f"worker exited:\n{text[-3000:]}"
            time.sleep(0.1)
        pytest.fail(f"worker log never showed {needles} within {timeout}s:\n{self.log()[-3000:]}")


def _celery(
    worker: WorkerProcess, *args: str, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "beatflow", *args],
        env=worker.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def worker(
    redis_server: services.RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """`celery -A beatflow worker` on a queue of its own, an empty dags folder, a probe task."""
    root = tmp_path_factory.mktemp("app")
    (root / "dags").mkdir()
    (root / "probe").mkdir()
    (root / "probe" / "bf_probe.py").write_text(textwrap.dedent(PROBE_MODULE))
    suffix = uuid.uuid4().hex[:8]
    queue, node = f"probe-{suffix}", f"probe-{suffix}@localhost"
    broker_url = redis_server.fresh_db_url()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    env.update(
        BEATFLOW_BROKER_URL=broker_url,
        BEATFLOW_DAGS_FOLDER=str(root / "dags"),
        BEATFLOW_DATABASE_URL=f"sqlite:///{root / 'beatflow.db'}",
        BEATFLOW_QUEUES=queue,
        BEATFLOW_LOG_FORMAT="text",
        PYTHONPATH=os.pathsep.join([str(root / "probe"), env.get("PYTHONPATH", "")]),
    )
    log_path = root / "worker.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "beatflow",
                "worker",
                "-l",
                "info",
                "-n",
                node,
                "-Q",
                queue,
                "--concurrency",
                "1",
                "-I",
                "bf_probe",
                "--without-gossip",
                "--without-mingle",
            ],
            env=env,
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    handle = WorkerProcess(node, queue, broker_url, env, log_path, process)
    try:
        handle.wait_for_log("ready.", timeout=60)
        yield handle
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _publish(worker: WorkerProcess, marker: Path, serializer: str) -> str:
    """A Celery protocol-2 task message, published raw with kombu in ``serializer``."""
    task_id = str(uuid.uuid4())
    body = ([str(marker)], {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
    headers = {
        "lang": "py",
        "task": PROBE_TASK,
        "id": task_id,
        "root_id": task_id,
        "parent_id": None,
        "group": None,
        "retries": 0,
        "eta": None,
        "expires": None,
        "timelimit": [None, None],
        "argsrepr": repr([str(marker)]),
        "kwargsrepr": "{}",
        "origin": "test_app",
        "ignore_result": True,
    }
    with kombu.Connection(worker.broker_url) as conn:
        producer = conn.Producer()
        producer.publish(
            body,
            routing_key=worker.queue,
            exchange="",
            serializer=serializer,
            headers=headers,
            correlation_id=task_id,
            delivery_mode=2,
        )
    return task_id


def test_the_app_loads_with_celery_a_beatflow_and_the_worker_answers_inspect_ping(
    worker: WorkerProcess,
) -> None:
    result = _celery(worker, "inspect", "ping", "-d", worker.node, "--timeout", "5")

    assert result.returncode == 0, result.stdout + result.stderr
    assert worker.node in result.stdout and "pong" in result.stdout

    registered = _celery(worker, "inspect", "registered", "-d", worker.node, "--timeout", "5")
    assert PROBE_TASK in registered.stdout


def test_a_pickled_message_is_refused_and_logged_and_never_runs(
    worker: WorkerProcess, tmp_path: Path
) -> None:
    marker = tmp_path / "pickled.marker"

    pickled_id = _publish(worker, marker, "pickle")

    log = worker.wait_for_log("Refusing to deserialize untrusted content of type pickle")
    assert "Received invalid task message" in log and "discarded" in log
    assert str(marker) not in log  # the payload itself is never logged
    assert f"{PROBE_TASK}[{pickled_id}]" not in log  # never received as a task, never run
    assert not marker.exists()
    with redis.Redis.from_url(worker.broker_url) as client:
        assert client.llen(worker.queue) == 0  # discarded, not left to be redelivered
        assert client.hlen("unacked") == 0

    # The same task as JSON on the same queue runs: the refusal was about the content type.
    ran = tmp_path / "json.marker"
    json_id = _publish(worker, ran, "json")
    worker.wait_for_log(f"{PROBE_TASK}[{json_id}] succeeded")
    assert ran.read_text() == "ran"
    assert not marker.exists()
