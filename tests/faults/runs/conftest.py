"""A worker whose reconciler passes every half second and resumes runs silent for 6 s (the
defaults are 10 s and 60 s), on a Redis database and a PostgreSQL database of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests import services
from tests.cluster import Cluster
from tests.cluster import cluster as make_cluster

FAST_RECONCILER = {
    "BEATFLOW_RECONCILE_INTERVAL": "0.5",
    "BEATFLOW_RECONCILE_STALL_SECONDS": "6",
    "BEATFLOW_RECONCILE_MAX_RESUMES": "1",
    "BEATFLOW_LEASE_SECONDS": "3",
}
# every run in these tests must end well within this (the default settings' bound is 3 minutes)
BOUND = 120.0


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
        with make_cluster(tmp, redis_url, db_url, env=FAST_RECONCILER) as c:
            yield c
    finally:
        services.flush_redis(redis_url)
        postgres_server.drop_database(db_name)
