"""The store rides out a PostgreSQL restart: while the server is down every call raises
StoreUnavailableError (the caller retries); once it is back, the same Store works again, and a
lease taken before the outage can still finish its task run."""

from __future__ import annotations

import pytest

from beatflow.errors import StoreUnavailableError
from beatflow.store import Store
from tests import services


@pytest.mark.slow
def test_a_store_recovers_after_postgresql_restarts(own_postgres: services.OwnedPostgres) -> None:
    store = Store(own_postgres.url, lease_seconds=300)
    try:
        store.upgrade()
        before = store.claim_task_run("etl/r/a", dag_id="etl", run_id="r", task_id="a")
        assert before.outcome == "run" and before.token is not None

        store.create_dag_run("etl", "r")
        assert store.start_queued_dag_runs("etl", 1)
        assert store.read_and_claim("etl", "r", "c", -1, "etl/r/c", [])[2] is not None

        own_postgres.stop()
        with pytest.raises(StoreUnavailableError):
            store.finish_task_run("etl/r/a", before.token, state="success", result=1)
        with pytest.raises(StoreUnavailableError):
            store.claim_task_run("etl/r/b", dag_id="etl", run_id="r", task_id="b")
        with pytest.raises(StoreUnavailableError):  # the node wrapper's read, on the driver
            store.read_and_claim("etl", "r", "d", -1, "etl/r/d", [])

        own_postgres.start()
        assert store.read_and_claim("etl", "r", "d", -1, "etl/r/d", [])[2] is not None
        assert store.finish_task_run("etl/r/a", before.token, state="success", result=1)
        after = store.claim_task_run("etl/r/b", dag_id="etl", run_id="r", task_id="b")
        assert after.outcome == "run"
        assert (
            store.claim_task_run("etl/r/a", dag_id="etl", run_id="r", task_id="a").record.result
            == 1
        )
    finally:
        store.close()
