"""A real beatflow stack per test module for the Celery-citizenship tests: a worker loading
this folder's dags (with signal receivers), `beatflow exporter` and `celery -A beatflow flower`
with basic auth, on a Redis database and a PostgreSQL database of their own."""

from __future__ import annotations

import base64
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import procs, services
from tests.cluster import Cluster, own_cluster
from tests.integration.observability.conftest import Samples, exporter_proc, scrape
from tests.integration.observability.conftest import wait_exporter_ready as _exporter_ready

DAGS = Path(__file__).resolve().parent / "dags"
FLOWER_USER = "ops"
FLOWER_PASSWORD = "flower-pw-for-tests"
FLOWER = [sys.executable, "-m", "celery", "-A", "beatflow", "flower", "--address=127.0.0.1"]


def get_json(url: str, user: str = FLOWER_USER, password: str = FLOWER_PASSWORD) -> Any:
    request = urllib.request.Request(url)
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10) as response:  # local URL
        return json.loads(response.read())


def start_flower(
    tmp: Path, env: dict[str, str], *extra: str, auth: dict[str, str] | None = None
) -> tuple[procs.Proc, str]:
    """``celery -A beatflow flower`` as users start it (credentials in the environment, unless
    ``auth`` gives other variables); returns the process and its base URL once it answers."""
    port = services.free_port()
    credentials = auth or {"BEATFLOW_FLOWER_PASSWORD": FLOWER_PASSWORD}
    flower_env = procs.beatflow_env({**env, "BEATFLOW_FLOWER_USER": FLOWER_USER, **credentials})
    name = f"flower-{port}"
    proc = procs.Proc(
        [*FLOWER, f"--port={port}", *extra], flower_env, tmp / f"{name}.log", name=name
    ).start()
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.popen is not None and proc.popen.poll() is not None:
            raise RuntimeError(f"flower exited:\n{proc.log()[-3000:]}")
        try:
            with urllib.request.urlopen(base + "/healthcheck", timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.HTTPError):
            return False

    procs.wait_for(up, timeout=60, message="flower to answer /healthcheck")
    return proc, base


def _flower_follows_events(base: str) -> None:
    """Flower answers /healthcheck before its event receiver consumes: events sent in between
    (a whole DAG run on a loaded machine) never reach it. Its event state knowing a live worker
    (from the worker's heartbeats, every 2 s) shows that the receiver is consuming."""

    def alive() -> bool:
        try:
            status = get_json(base + "/api/workers?status=true")
        except (OSError, urllib.error.HTTPError, ValueError):
            return False
        return any(status.values()) if isinstance(status, dict) else False

    procs.wait_for(alive, timeout=60, message="Flower's event state to show a live worker")


@dataclass
class Stack:
    cluster: Cluster
    flower: procs.Proc
    flower_url: str
    exporter: procs.Proc
    metrics_url: str

    def scrape(self) -> Samples:
        return scrape(self.metrics_url)

    def lines(self, name: str) -> list[dict[str, Any]]:
        path = self.cluster.marks / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.fixture(scope="module")
def stack(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("celery")
    port = services.free_port()
    env = {"BEATFLOW_METRICS_PORT": str(port)}
    with own_cluster(redis_server, postgres_server, tmp, dags=DAGS, env=env) as c:
        exporter = exporter_proc(tmp, c.env).start()
        flower: procs.Proc | None = None
        try:
            _exporter_ready(exporter, f"http://127.0.0.1:{port}")
            flower, flower_url = start_flower(tmp, c.env)
            _flower_follows_events(flower_url)
            yield Stack(
                cluster=c,
                flower=flower,
                flower_url=flower_url,
                exporter=exporter,
                metrics_url=f"http://127.0.0.1:{port}/metrics",
            )
        finally:
            if flower is not None:
                flower.stop()
            exporter.stop()
