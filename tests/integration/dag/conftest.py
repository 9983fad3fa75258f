"""One real worker per test module, on a Redis database and a PostgreSQL database of its own,
loading tests/dags."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from celery import Celery

from beatflow.app import create_app
from beatflow.settings import Settings
from tests import procs, services

DAGS = Path(__file__).resolve().parents[2] / "dags"


@dataclass
class Cluster:
    app: Celery
    env: dict[str, str]
    worker: procs.Proc
    marks: Path

    def log(self) -> str:
        return self.worker.log()


@pytest.fixture(scope="module")
def cluster(redis_server: services.RedisServer, postgres_server: services.PostgresServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    redis_url = redis_server.fresh_db_url()
    db_name = f"bf_{uuid.uuid4().hex[:12]}"
    db_url = postgres_server.create_database(db_name)
    queue = f"q{uuid.uuid4().hex[:6]}"
    env = {"BEATFLOW_BROKER_URL": redis_url, "BEATFLOW_DATABASE_URL": db_url,
           "BEATFLOW_DAGS_FOLDER": str(DAGS), "BEATFLOW_QUEUES": queue,
           "BEATFLOW_LEASE_SECONDS": "5", "BEATFLOW_TEST_MARKS": str(tmp / "marks")}
    settings = Settings.from_env(env)
    app = create_app(settings)
    from beatflow.store import Store

    Store.from_settings(settings).upgrade()
    worker = procs.celery_worker(tmp, env, queues=queue, concurrency=2).start()
    try:
        procs.wait_worker_ready(app, worker)
        yield Cluster(app=app, env=env, worker=worker, marks=tmp / "marks")
    finally:
        worker.stop()
        app.close()
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)
