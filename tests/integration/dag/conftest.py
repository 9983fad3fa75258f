"""One real worker per test module, on a Redis database and a PostgreSQL database of its own,
loading tests/dags."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests import services
from tests.cluster import Cluster
from tests.cluster import cluster as make_cluster


@pytest.fixture(scope="module")
def cluster(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    redis_url = redis_server.fresh_db_url()
    db_name = f"bf_{uuid.uuid4().hex[:12]}"
    db_url = postgres_server.create_database(db_name)
    try:
        with make_cluster(tmp, redis_url, db_url) as c:
            yield c
    finally:
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)
