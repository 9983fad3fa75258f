"""A real worker loading Airflow DAG files (tests/integration/compat/airflow_dags), on a Redis
database and a PostgreSQL database of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services
from tests.cluster import Cluster
from tests.cluster import cluster as make_cluster

AIRFLOW_DAGS = Path(__file__).resolve().parent / "airflow_dags"


@pytest.fixture(scope="module")
def airflow_cluster(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    redis_url = redis_server.fresh_db_url()
    db_name = f"bf_{uuid.uuid4().hex[:12]}"
    db_url = postgres_server.create_database(db_name)
    try:
        with make_cluster(tmp, redis_url, db_url, dags=AIRFLOW_DAGS) as c:
            yield c
    finally:
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)
