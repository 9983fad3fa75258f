"""A real Sentinel set (a master, a replica and a Sentinel, Debian's ``redis-server --sentinel``)
behind ``BEATFLOW_BROKER_URL=sentinel://...?master_name=...``: the beat (lock, schedule, fires)
and a worker (broker, result backend) reach the master through Sentinel, and keep going when
the master fails over (``SENTINEL FAILOVER``): every tick fires once. The worker's reconciler
thread reaches Redis through Sentinel too: it takes its lease and runs its passes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from beatflow import connections
from beatflow.runs.reconciler import LEASE_KEY
from tests.integration.scheduler.beatcluster import beat_cluster
from tests.integration.scheduler.test_beat_replicas import assert_every_tick_once
from tests.procs import wait_for
from tests.services._base import ServiceError
from tests.services.sentinel_set import MASTER, master_port, start_sentinel_set

pytestmark = pytest.mark.slow


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[tuple[str, redis.Redis, list[int]]]:
    try:
        with start_sentinel_set(tmp_path / "sentinel") as sset:
            yield sset.url, sset.sentinel, sset.ports
    except ServiceError as exc:
        pytest.skip(str(exc))


def test_the_beat_and_a_worker_carry_on_across_a_sentinel_failover(
    sentinel_set: tuple[str, redis.Redis, list[int]],
    make_postgres_db: Callable[[], str],
    tmp_path: Path,
) -> None:
    url, sentinel, ports = sentinel_set
    client = connections.redis_client(url, timeout=5)
    assert client.ping()
    with beat_cluster(tmp_path / "cluster", url, make_postgres_db()) as cluster:
        dag = "sentinel_every_second"
        cluster.write_dag(dag)
        worker = cluster.start_worker()
        cluster.start_beat("a")
        cluster.wait_leader(timeout=60)
        cluster.wait_runs(dag, 3, timeout=60)
        wait_for(  # the worker ran a run end to end through the Sentinel-managed broker
            lambda: any(r.state == "success" for r in cluster.runs(dag)),
            timeout=60,
            message="a successful run before the failover",
        )
        assert master_port(sentinel) == ports[0]
        sentinel.execute_command("SENTINEL", "FAILOVER", MASTER)
        wait_for(lambda: master_port(sentinel) == ports[1], timeout=60, message="the failover")
        before = len(cluster.runs(dag))
        cluster.wait_runs(dag, before + 5, timeout=90)
        wait_for(
            lambda: sum(r.state == "success" for r in cluster.runs(dag)) >= before + 3,
            timeout=90,
            message="runs fired after the failover to succeed",
        )
        assert worker.popen is not None and worker.popen.poll() is None, cluster.logs()
        assert all(b.popen is not None and b.popen.poll() is None for b in cluster.beats)
        assert_every_tick_once(cluster, dag)
        # the beat leads on the new master (the old master is a replica now)
        assert cluster.wait_leader({"a"}, timeout=60) == "a"
    client.close()


def test_a_worker_on_a_sentinel_broker_runs_the_reconciler(
    sentinel_set: tuple[str, redis.Redis, list[int]],
    make_postgres_db: Callable[[], str],
    tmp_path: Path,
) -> None:
    url, _, _ = sentinel_set
    with beat_cluster(
        tmp_path / "cluster", url, make_postgres_db(), BEATFLOW_RECONCILE_INTERVAL="0.5"
    ) as cluster:
        dag = "sentinel_left_behind"
        cluster.write_dag(dag, schedule="None")
        # a queued run nobody dispatched (no beat here): only a reconciler pass sends it
        cluster.store.create_dag_run(dag, "left-behind")
        cluster.start_worker()
        try:
            wait_for(
                lambda: cluster.client.get(LEASE_KEY) is not None,
                timeout=60,
                message="the worker's reconciler to take its lease through Sentinel",
            )
            wait_for(
                lambda: (
                    getattr(cluster.store.get_dag_run(dag, "left-behind"), "state", None)
                    == "success"
                ),
                timeout=60,
                message="a reconciler pass to dispatch the left-behind run, and it to succeed",
            )
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{cluster.logs()}") from None
