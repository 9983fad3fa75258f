"""`beatflow db prune` against a real database: deletes finished runs older than the age given,
refuses to run against a database behind the code."""

from __future__ import annotations

from collections.abc import Callable

from beatflow.store import Store
from tests.integration.store.conftest import beatflow


def test_db_prune_deletes_finished_runs_older_than_the_age(database_url: str) -> None:
    store = Store(database_url)
    try:
        store.upgrade()
        for run_id in ("a", "b"):
            store.create_dag_run("etl", run_id)
            store.finish_dag_run("etl", run_id, "success")
        store.create_dag_run("etl", "still-queued")

        kept = beatflow(database_url, "db", "prune", "--older-than", "30d")
        assert kept.returncode == 0, kept.stderr
        assert "deleted 0 finished DAG run(s) that ended more than 30d ago" in kept.stdout

        pruned = beatflow(database_url, "db", "prune", "--older-than", "0m", "--batch-size", "1")
        assert pruned.returncode == 0, pruned.stderr
        assert "deleted 2 finished DAG run(s)" in pruned.stdout
        assert [r.run_id for r in store.list_dag_runs("etl")] == ["still-queued"]
    finally:
        store.close()


def test_db_prune_on_a_database_behind_the_code_says_to_upgrade(
    make_postgres_db: Callable[[], str],
) -> None:
    result = beatflow(make_postgres_db(), "db", "prune", "--older-than", "30d")
    assert result.returncode == 1
    assert "run `beatflow db upgrade`" in result.stderr
    assert "Traceback" not in result.stderr
