"""Fixtures for beat tests: a BeatCluster on a Redis DB and a PostgreSQL DB of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.scheduler.beatcluster import BeatCluster, beat_cluster


@pytest.fixture
def cluster(
    redis_url: str, make_postgres_db: Callable[[], str], tmp_path: Path
) -> Iterator[BeatCluster]:
    with beat_cluster(tmp_path, redis_url, make_postgres_db()) as c:
        yield c
