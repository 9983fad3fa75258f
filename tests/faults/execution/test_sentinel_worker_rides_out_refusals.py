"""A worker whose broker is a real Redis Sentinel set (``BEATFLOW_BROKER_URL=sentinel://...``)
rides out the master refusing writes (maxmemory 1: "OOM command not allowed") like a worker on
a plain redis:// broker does. Stock kombu's SentinelTransport counts redis-py's OutOfMemoryError
among the channel errors: the first refused ack stopped the worker with "Unrecoverable error:
server:OutOfMemoryError"."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster import cluster
from tests.faults.execution.test_worker_rides_out_redis_oom import rides_out_refused_writes
from tests.services._base import ServiceError
from tests.services.sentinel_set import SentinelSet, start_sentinel_set

pytestmark = pytest.mark.slow


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    try:
        with start_sentinel_set(tmp_path / "sentinel") as sset:
            yield sset
    except ServiceError as exc:
        pytest.skip(str(exc))


def test_a_worker_on_a_sentinel_broker_rides_out_the_master_refusing_writes(
    tmp_path: Path, sentinel_set: SentinelSet, make_postgres_db: Callable[[], str]
) -> None:
    with cluster(tmp_path, sentinel_set.url, make_postgres_db(), workers=0) as c:
        master = sentinel_set.master()
        rides_out_refused_writes(c, master, "sent")
        master.close()
