"""Building a Store: limits from Settings, an in-memory SQLite for quick use, bad limits refused."""

from __future__ import annotations

import pytest

from beatflow.errors import StoreError
from beatflow.settings import Settings
from beatflow.store import Store


def test_a_store_from_settings_takes_the_url_lease_and_result_limit() -> None:
    settings = Settings(database_url="sqlite://", lease_seconds=12.5, result_max_bytes=4096)
    store = Store.from_settings(settings)
    try:
        assert (store.url, store.lease_seconds, store.result_max_bytes) == ("sqlite://", 12.5, 4096)
        assert store.dialect == "sqlite"
    finally:
        store.close()


def test_an_in_memory_sqlite_store_is_usable_after_ensure_ready() -> None:
    store = Store("sqlite://")
    try:
        store.ensure_ready()
        assert store.current_revision() == Store.head_revision()
        _, created = store.create_dag_run("etl", "r")
        assert created and store.get_dag_run("etl", "r") is not None
    finally:
        store.close()


@pytest.mark.parametrize("lease", [0.0, -1.0, float("nan"), float("inf")])
def test_a_lease_that_is_not_a_positive_number_of_seconds_is_refused(lease: float) -> None:
    with pytest.raises(StoreError, match="lease_seconds"):
        Store("sqlite://", lease_seconds=lease)
