"""Fixtures for the store contract suite: a migrated Store on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from beatflow.store import Store

MakeStore = Callable[..., Store]
BEATFLOW = str(Path(sys.executable).with_name("beatflow"))


def beatflow(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the `beatflow` command in a child process against ``database_url``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    env["BEATFLOW_DATABASE_URL"] = database_url
    return subprocess.run(
        [BEATFLOW, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


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
