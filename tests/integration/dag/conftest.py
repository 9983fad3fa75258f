"""One real worker per test module, on a Redis database and a PostgreSQL database of its own,
loading tests/dags."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import services
from tests.cluster import Cluster, own_cluster


@pytest.fixture(scope="module")
def cluster(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    with own_cluster(redis_server, postgres_server, tmp) as c:
        yield c
