"""A worker process's look at a new version of its dags folder (worker/reload.py): new DAGs are
added and their tasks registered, a DAG it has is never replaced, a version is imported once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from beatflow.app import create_app
from beatflow.runtime import runtime_of
from beatflow.settings import Settings
from beatflow.worker import reload

FIRST = """
from beatflow import DAG, task


@task
def one() -> int:
    return {value}


with DAG("{dag_id}"):
    one()
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "kept.py").write_text(FIRST.format(dag_id="kept", value=1))
    return dags


@pytest.fixture
def app(folder: Path) -> Iterator[Celery]:
    settings = Settings(
        broker_url="redis://127.0.0.1:1/0",
        database_url="sqlite:///:memory:",
        dags_folder=folder,
    )
    app: Celery = create_app(settings)
    yield app
    app.close()


def test_a_new_dag_file_is_loaded_and_its_tasks_registered(app: Celery, folder: Path) -> None:
    runtime = runtime_of(app)
    assert "late.one" not in app.tasks
    (folder / "late.py").write_text(FIRST.format(dag_id="late", value=2))
    assert reload.refresh_for(runtime, "late.one")
    assert "late" in runtime.dagbag.dags and app.tasks["late.one"].__trace__ is not None
    assert reload.reload_of(runtime).refresh() == []  # this version is imported once


def test_a_dag_already_loaded_is_never_replaced(app: Celery, folder: Path) -> None:
    runtime = runtime_of(app)
    before = runtime.dag("kept")
    (folder / "kept.py").write_text(FIRST.format(dag_id="kept", value=3) + "\n# changed\n")
    assert not reload.refresh_for(runtime, "kept.other")
    assert runtime.dag("kept") is before  # its tasks run against the version loaded at start


def test_why_a_dag_is_not_loaded_names_the_module_that_failed(app: Celery, folder: Path) -> None:
    runtime = runtime_of(app)
    (folder / "broken.py").write_text("raise ImportError('no such package: ' + 'y' * 300)\n")
    assert not reload.refresh_for(runtime, "ghost.one")
    reason = reload.not_loaded_reason(runtime, "ghost")
    assert reason.startswith('DAG "ghost" is not loaded on worker ')
    assert "broken.py:1: ImportError: no such package: " + "y" * 300 in reason


def test_builtin_names_never_import_the_folder(app: Celery, folder: Path) -> None:
    (folder / "late.py").write_text(FIRST.format(dag_id="late", value=2))
    assert not reload.refresh_for(runtime_of(app), "beatflow.nothing")
    assert "late" not in runtime_of(app).dagbag.dags
