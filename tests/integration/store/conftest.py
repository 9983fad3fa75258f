"""Fixtures for the store contract suite: a migrated Store on SQLite and on PostgreSQL."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from beatflow.store import Store
from tests.procs import run_beatflow

MakeStore = Callable[..., Store]


def beatflow(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the `beatflow` command in a child process against ``database_url``."""
    return run_beatflow({"BEATFLOW_DATABASE_URL": database_url}, *args, timeout=60)


@pytest.fixture
def make_store(database_url: str) -> Iterator[MakeStore]:
    """Factory: a Store on the test's database (upgraded to head), closed afterwards."""
    made: list[Store] = []

    def make(**kwargs: Any) -> Store:
        store = Store(database_url, **kwargs)
        made.append(store)
        store.upgrade()
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: MakeStore) -> Store:
    return make_store()
