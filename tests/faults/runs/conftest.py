"""A worker whose reconciler passes every half second and resumes runs silent for 6 s (the
defaults are 10 s and 60 s), on a Redis database and a PostgreSQL database of its own; and a
real `beatflow exporter` following its events, for the reconciler's action counter."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests import procs, services
from tests.cluster import Cluster, own_cluster
from tests.integration.observability.conftest import (
    Samples,
    exporter_proc,
    scrape,
    wait_exporter_ready,
)

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
    with own_cluster(redis_server, postgres_server, tmp, env=FAST_RECONCILER) as c:
        yield c


@pytest.fixture(scope="module")
def metrics(cluster: Cluster) -> Iterator[Callable[[], Samples]]:
    """A scrape of an exporter that follows the cluster's event stream (live: it has seen the
    worker's heartbeat, so an event sent from now on is counted)."""
    port = services.free_port()
    env = {**cluster.env, "BEATFLOW_METRICS_PORT": str(port)}
    exporter = exporter_proc(cluster.tmp, env).start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_exporter_ready(exporter, base)
        procs.wait_for(
            lambda: scrape(base + "/metrics").total("celery_worker_up") >= 1,
            timeout=60,
            message="the exporter to see the worker's heartbeat",
        )
        yield lambda: scrape(base + "/metrics")
    finally:
        exporter.stop()


def wait_action(
    metrics: Callable[[], Samples], dag: str, action: str, timeout: float = 30.0
) -> float:
    """beatflow_reconciler_actions_total{dag, action} once it is counted."""
    name = "beatflow_reconciler_actions_total"
    value: float = procs.wait_for(  # type: ignore[assignment]
        lambda: metrics().get_value(name, dag=dag, action=action),
        timeout=timeout,
        message=f"{name}{{dag={dag!r}, action={action!r}}}",
    )
    return value
