"""Schema management: idempotent upgrades (API and `beatflow db`), start-up refusal on a
PostgreSQL database behind the code, automatic upgrade of the embedded SQLite, no drift between
models and migrations."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from beatflow.errors import SchemaOutOfDateError, StoreError
from beatflow.store import Store
from beatflow.store.models import Base
from beatflow.store.schema import VERSION_TABLE
from tests.integration.store import upgraders
from tests.integration.store.conftest import beatflow


def test_upgrading_twice_reaches_head_and_changes_nothing(database_url: str) -> None:
    store = Store(database_url)
    try:
        head = Store.head_revision()
        assert store.upgrade() == head
        store.create_dag_run("etl", "r")
        assert store.upgrade() == head
        assert store.current_revision() == head
        assert store.get_dag_run("etl", "r") is not None
        store.check_schema()
    finally:
        store.close()


def test_beatflow_db_upgrade_twice_prints_the_revision_both_times(database_url: str) -> None:
    head = Store.head_revision()
    first = beatflow(database_url, "db", "upgrade")
    assert first.returncode == 0, first.stderr
    assert f"upgraded from empty to revision {head} (head)" in first.stdout
    second = beatflow(database_url, "db", "upgrade")
    assert second.returncode == 0, second.stderr
    assert f"already at revision {head} (head)" in second.stdout
    current = beatflow(database_url, "db", "current")
    assert current.returncode == 0 and "up to date" in current.stdout


def test_an_empty_postgresql_database_stops_start_up_saying_to_run_db_upgrade(
    make_postgres_db: Callable[[], str],
) -> None:
    store = Store(make_postgres_db())
    try:
        with pytest.raises(SchemaOutOfDateError) as caught:
            store.ensure_ready()
        assert "run `beatflow db upgrade`" in str(caught.value)
        assert caught.value.current is None and caught.value.head == Store.head_revision()
        assert "behind" in beatflow(store.url, "db", "current").stdout
    finally:
        store.close()


def test_a_downgraded_postgresql_database_stops_start_up_until_it_is_upgraded(
    make_postgres_db: Callable[[], str],
) -> None:
    store = Store(make_postgres_db())
    try:
        store.upgrade()
        store.downgrade("base")
        with pytest.raises(SchemaOutOfDateError, match="run `beatflow db upgrade`"):
            store.ensure_ready()
        assert beatflow(store.url, "db", "upgrade").returncode == 0
        store.ensure_ready()
    finally:
        store.close()


def test_a_database_upgraded_by_a_newer_beatflow_is_refused_with_a_clear_error(
    database_url: str,
) -> None:
    store = Store(database_url)
    try:
        store.upgrade()
        with store._write("faking a newer revision") as conn:
            conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
        with pytest.raises(StoreError, match="upgraded by a newer beatflow") as caught:
            store.check_schema()
        assert not isinstance(caught.value, SchemaOutOfDateError)
    finally:
        store.close()


def test_the_embedded_sqlite_is_upgraded_at_start_up_creating_its_folder(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "there.db"
    store = Store(f"sqlite:///{path}")
    try:
        store.ensure_ready()
        assert path.exists()
        assert store.current_revision() == Store.head_revision()
        store.ensure_ready()
    finally:
        store.close()


def test_the_migrations_create_exactly_the_schema_the_models_describe(database_url: str) -> None:
    store = Store(database_url)
    try:
        store.upgrade()
        engine = sa.create_engine(store.url)
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
            )
            diff = compare_metadata(context, Base.metadata)
        engine.dispose()
        assert diff == []
    finally:
        store.close()


@pytest.mark.slow
def test_processes_starting_together_upgrade_the_same_fresh_database_once(
    database_url: str,
) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, report = ctx.Barrier(4), ctx.Queue()
    procs = [
        ctx.Process(target=upgraders.ensure_ready_at_once, args=(database_url, barrier, report))
        for _ in range(4)
    ]
    for proc in procs:
        proc.start()
    outcomes = [report.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    assert outcomes == [Store.head_revision()] * 4


def test_upgrading_a_database_from_a_newer_beatflow_raises_store_error(database_url: str) -> None:
    store = Store(database_url)
    try:
        store.upgrade()
        with store._write("faking a newer revision") as conn:
            conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
        with pytest.raises(StoreError, match="upgraded by a newer beatflow"):
            store.upgrade()
    finally:
        store.close()


def test_the_running_counts_of_a_database_upgraded_with_runs_running_start_from_its_rows(
    database_url: str,
) -> None:
    """Migration 0012 counts the runs already running; its downgrade goes back to counting rows."""
    store = Store(database_url)
    try:
        store.upgrade()
        store.downgrade("0011")
        with store._engine.begin() as conn:
            for n, state in enumerate(["running", "running", "queued", "success", "running"]):
                conn.execute(
                    sa.text(
                        "INSERT INTO dag_runs (dag_id, run_id, trigger, conf, state, queued_at) "
                        "VALUES (:d, :r, 'manual', '{}', :s, CURRENT_TIMESTAMP)"
                    ),
                    {"d": "a" if n < 4 else "b", "r": f"r{n}", "s": state},
                )
        store.upgrade()
        with store._engine.connect() as conn:
            counts = dict(conn.execute(sa.text("SELECT dag_id, running FROM dag_run_counts")).all())
        assert counts == {"a": 2, "b": 1}
        assert store.start_queued_dag_runs("a", 2) == []  # r2 fits under 2 only after a finish
        store.finish_dag_run("a", "r0", "success")
        assert [r.run_id for r in store.start_queued_dag_runs("a", 2)] == ["r2"]
        store.downgrade("0011")
        if store.dialect == "postgresql":  # its dispatch is in the database: back to counting
            # (in SQL: this code's statements name the columns of the head revision)
            with store._engine.begin() as conn:
                conn.execute(sa.text("UPDATE dag_runs SET state = 'success' WHERE run_id = 'r1'"))
                conn.execute(sa.text("INSERT INTO dag_runs (dag_id, run_id, trigger, conf, state, "
                                     "queued_at) VALUES ('a', 'r9', 'manual', '{}', 'queued', "
                                     "CURRENT_TIMESTAMP)"))  # fmt: skip
            with store._engine.begin() as conn:
                started = conn.execute(
                    sa.text("SELECT run_id FROM beatflow_start_queued('a', 2)")
                ).scalars()
                assert list(started) == ["r9"]
        assert "dag_run_counts" not in sa.inspect(store._engine).get_table_names()
    finally:
        store.close()
