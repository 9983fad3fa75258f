"""Fixtures for the run lifecycle tests: an app (no worker) on a Redis database and a
PostgreSQL database of the test's own, a reader of what was sent to the broker, and a real
worker per module for the verbs run end to end."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from beatflow.app import create_app
from beatflow.settings import Settings
from beatflow.store import Store
from tests import services
from tests.cluster import Cluster, own_cluster

DAGS = Path(__file__).resolve().parents[2] / "dags"


def make_app(redis_url: str, database_url: str, queue: str, **env: str) -> Celery:
    settings = Settings.from_env(
        {
            "BEATFLOW_BROKER_URL": redis_url,
            "BEATFLOW_DATABASE_URL": database_url,
            "BEATFLOW_DAGS_FOLDER": str(DAGS),
            "BEATFLOW_QUEUES": queue,
            "BEATFLOW_LEASE_SECONDS": "5",
            **env,
        }
    )
    Store.from_settings(settings).upgrade()
    return create_app(settings)


@pytest.fixture
def queue() -> str:
    return f"q{uuid.uuid4().hex[:6]}"


@pytest.fixture
def app(redis_url: str, postgres_url: str, queue: str) -> Iterator[Celery]:
    made = make_app(redis_url, postgres_url, queue)
    yield made
    made.close()


def sent_run_ids(redis_url: str, queue: str, task: str) -> list[str]:
    """The run ids of the messages of ``task`` waiting in ``queue``, oldest first."""
    client = redis.Redis.from_url(redis_url)
    out = []
    for raw in reversed(client.lrange(queue, 0, -1)):  # LPUSHed: the oldest is last
        message = json.loads(raw)
        if message["headers"].get("task") != task:
            continue
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        out.append(args[0])
    return out


@pytest.fixture(scope="module")
def c(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    """One real worker per test module, loading tests/dags."""
    with own_cluster(redis_server, postgres_server, tmp_path_factory.mktemp("cluster")) as c:
        yield c
