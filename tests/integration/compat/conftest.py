"""A real worker loading Airflow DAG files (tests/integration/compat/airflow_dags), on a Redis
database and a PostgreSQL database of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services
from tests.cluster import Cluster, own_cluster

AIRFLOW_DAGS = Path(__file__).resolve().parent / "airflow_dags"


@pytest.fixture(scope="module")
def airflow_cluster(
    redis_server: services.RedisServer,
    postgres_server: services.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    with own_cluster(redis_server, postgres_server, tmp, dags=AIRFLOW_DAGS) as c:
        yield c
