"""With a password-protected Redis, no password reaches what Celery and Flower show of the
configuration (`celery -A beatflow inspect conf`, Flower's /api/workers and worker page), and a
Celery setting passed through BEATFLOW_CELERY_* reaches the worker."""

from __future__ import annotations

import base64
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from beatflow.app import create_app
from beatflow.settings import Settings
from tests import procs, services
from tests.integration.celery.conftest import FLOWER_PASSWORD, FLOWER_USER, start_flower

pytestmark = pytest.mark.slow

REDIS_PASSWORD = "redis-secret-6f1c"


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[str]:
    """A Redis of the test's own that requires a password; its URL (with the password)."""
    port = services.free_port()
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            REDIS_PASSWORD,
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{port}/0"
    try:
        procs.wait_for(lambda: _pings(url), timeout=30, message="the locked Redis")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _pings(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url).ping())
    except redis.RedisError:
        return False


def _get(url: str) -> str:
    request = urllib.request.Request(url)
    token = base64.b64encode(f"{FLOWER_USER}:{FLOWER_PASSWORD}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=20) as response:
        return str(response.read().decode())


def test_no_password_shows_in_inspect_conf_or_flower_and_pass_through_reaches_the_worker(
    locked_redis: str, tmp_path: Path
) -> None:
    env = {
        "BEATFLOW_BROKER_URL": locked_redis,
        "BEATFLOW_REDBEAT_URL": locked_redis.replace("/0", "/1"),
        "BEATFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'bf.db'}",
        "BEATFLOW_DAGS_FOLDER": str(tmp_path),
        "BEATFLOW_CELERY_WORKER_MAX_TASKS_PER_CHILD": "7",
    }
    settings = Settings.from_env(env)
    app = create_app(settings, load_dags=False)
    worker = procs.celery_worker(tmp_path, env, queues="default", name="locked").start()
    flower = None
    try:
        procs.wait_worker_ready(app, worker)
        conf = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "beatflow", "inspect", "conf", "-j"],
            env=procs.beatflow_env(env),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert conf.returncode == 0, conf.stderr[-2000:]
        assert '"redbeat_redis_url"' in conf.stdout
        assert '"worker_max_tasks_per_child": 7' in conf.stdout
        assert REDIS_PASSWORD not in conf.stdout + conf.stderr
        flower, base = start_flower(tmp_path, env)
        workers = _get(base + "/api/workers?refresh=1")
        assert "redbeat_redis_url" in workers  # the Config tab's data is there...
        assert REDIS_PASSWORD not in workers  # ...masked
        page = _get(base + f"/worker/{worker.name}@" + _hostname())
        assert "redbeat_redis_url" in page
        assert REDIS_PASSWORD not in page
    finally:
        if flower is not None:
            flower.stop()
        worker.stop()
        app.close()
    assert REDIS_PASSWORD not in worker.log()


def _hostname() -> str:
    import socket

    return socket.gethostname()
