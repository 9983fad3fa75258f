"""A database that cannot be reached surfaces as StoreUnavailableError (retry later), never as
a SQLAlchemy exception."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from beatflow.errors import StoreUnavailableError
from beatflow.store import Store


@pytest.fixture
def closed_port_store() -> Iterator[Store]:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = Store(f"postgresql+psycopg://beatflow:s3cret@127.0.0.1:{port}/beatflow")
    yield store
    store.close()


CALLS: dict[str, Callable[[Store], Any]] = {
    "ensure_ready": lambda s: s.ensure_ready(),
    "upgrade": lambda s: s.upgrade(),
    "create_dag_run": lambda s: s.create_dag_run("etl", "r"),
    "get_dag_run": lambda s: s.get_dag_run("etl", "r"),
    "claim_task_run": lambda s: s.claim_task_run("k", dag_id="etl", run_id="r", task_id="t"),
    "finish_task_run": lambda s: s.finish_task_run("k", "token", state="success", result=1),
    "renew_lease": lambda s: s.renew_lease("k", "token"),
    # the node wrapper's and the trigger's statements, on a pooled psycopg connection
    "read_and_claim": lambda s: s.read_and_claim("etl", "r", "t", -1, "k", []),
    "finish_and_close": lambda s: s.finish_and_close(
        "k", "token", result=1, dag_id="etl", run_id="r", run_state="success", max_active_runs=1
    ),
    "create_and_start_dag_run": lambda s: s.create_and_start_dag_run("etl", "r", 1),
    "add_dead_letter": lambda s: s.add_dead_letter(
        dedupe_key="k",
        dag_id="etl",
        run_id="r",
        task_id="t",
        map_index=-1,
        args={},
        conf={},
        error="e",
        traceback=None,
        tries=1,
    ),
    "is_paused": lambda s: s.is_paused("etl"),
    "prune": lambda s: s.prune(timedelta(days=1)),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_an_unreachable_postgresql_raises_store_unavailable_not_a_sqlalchemy_error(
    closed_port_store: Store, call: str
) -> None:
    with pytest.raises(StoreUnavailableError) as caught:
        CALLS[call](closed_port_store)
    message = str(caught.value)
    assert "is unavailable while" in message and "BEATFLOW_DATABASE_URL" in message
    assert "s3cret" not in message  # the password is masked
    assert isinstance(caught.value.__cause__, sa.exc.SQLAlchemyError)
    assert not isinstance(caught.value, sa.exc.SQLAlchemyError)
