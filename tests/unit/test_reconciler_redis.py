"""The reconciler reaches Redis through the one client factory (beatflow.connections): a
Sentinel broker URL gives it a client that follows the master, as the beat and the exporter get.
Building the client connects nowhere, so no Redis is needed here; the real Sentinel set is in
tests/integration/scheduler/test_sentinel.py."""

from __future__ import annotations

from typing import NoReturn

from celery import Celery
from redis.sentinel import SentinelConnectionPool

from beatflow.runs.reconciler import Reconciler
from beatflow.runtime import Runtime
from beatflow.settings import Settings

SENTINEL = "sentinel://:pw@10.0.0.1:26379,10.0.0.2:26380/2?master_name=main&sentinel_password=sp"


def _unused(*_: object) -> NoReturn:
    raise AssertionError("building the reconciler must not load DAGs, open the store or leases")


def test_the_reconciler_gets_a_sentinel_client_for_a_sentinel_broker_url() -> None:
    settings = Settings(broker_url=SENTINEL)
    app = Celery("beatflow-test", set_as_current=False)
    runtime = Runtime(app, settings, load_dags=_unused, open_store=_unused, make_leases=_unused)
    reconciler = Reconciler(runtime)  # was ValueError: redis-py's from_url knows no sentinel://
    pool = reconciler.redis.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "main"
    assert pool.connection_kwargs["db"] == 2 and pool.connection_kwargs["password"] == "pw"
    sentinels = [s.connection_pool.connection_kwargs for s in pool.sentinel_manager.sentinels]
    assert [(s["host"], s["port"]) for s in sentinels] == [("10.0.0.1", 26379), ("10.0.0.2", 26380)]
    assert all(s["password"] == "sp" for s in sentinels)
    # calls on a dead master time out rather than hang the thread
    assert pool.connection_kwargs["socket_timeout"] == 5
    app.close()
