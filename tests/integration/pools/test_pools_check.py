"""`beatflow dags check` against a real results database (SQLite and PostgreSQL): a task whose
pool does not exist is a warning (it would fail when it runs), not an error, and a check with
no database creates none."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from beatflow.cli import main
from beatflow.store import Store

POOLED = """
from beatflow import DAG, task


@task(pool="warehouse")
def load() -> int:
    return 1


@task(pool="lake", pool_slots=2)
def archive() -> int:
    return 2


with DAG("pooled_loads"):
    load() >> archive()
    archive.override(task_id="archive_again")()
"""


def check(folder: Path, database_url: str, *flags: str):
    env = {"BEATFLOW_DAGS_FOLDER": str(folder), "BEATFLOW_DATABASE_URL": database_url}
    return CliRunner().invoke(main, ["dags", "check", *flags], env=env)


def test_dags_check_warns_about_a_task_whose_pool_does_not_exist(tmp_path, database_url):
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "pooled.py").write_text(POOLED)
    store = Store(database_url)
    try:
        store.upgrade()
        store.set_pool("warehouse", 4)
    finally:
        store.close()

    result = check(tmp_path / "dags", database_url, "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["ok"] is True
    assert body["warnings"] == [
        "pool 'lake' does not exist, so 2 task(s) would fail when they run "
        "(pooled_loads.archive, pooled_loads.archive_again): create it with "
        "beatflow pools set lake N"
    ]

    result = check(tmp_path / "dags", database_url)
    assert result.exit_code == 0, result.output
    assert "warning: pool 'lake' does not exist" in result.output
    assert "1 DAGs loaded, 0 broken" in result.output


def test_dags_check_without_a_database_says_the_pools_were_not_checked(tmp_path):
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "pooled.py").write_text(POOLED)
    missing = tmp_path / "nowhere" / "beatflow.db"
    result = check(tmp_path / "dags", f"sqlite:///{missing}", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["warnings"] == [
        f"pools not checked (no results database at {missing})"
    ]
    assert not missing.parent.exists()  # the check created nothing
