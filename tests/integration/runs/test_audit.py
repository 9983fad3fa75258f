"""The audit table: every operator verb, from the CLI as from the API, leaves one record of who
did what to which DAG or run and why; a manual trigger's record is written in the transaction
that creates the run, so neither exists without the other (on SQLite and PostgreSQL)."""

from __future__ import annotations

import getpass
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from celery import Celery

from beatflow.app import create_app
from beatflow.errors import BeatflowError
from beatflow.runs import trigger_and_follow, trigger_dag
from beatflow.runtime import Runtime, runtime_of
from beatflow.settings import Settings
from beatflow.store import Store
from beatflow.store.engine import is_sqlite
from tests.integration.runs.conftest import sent_run_ids
from tests.procs import run_beatflow

DAG_SOURCE = """
from datetime import datetime, timezone

from beatflow import DAG, task


@task
def first() -> int:
    return 1


@task
def second(value: int) -> int:
    return value + 1


with DAG("audited", schedule="0 * * * *", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    second(first())
"""
REFUSE_PG = """
CREATE FUNCTION refuse_for_the_test() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
CREATE TRIGGER refuse_for_the_test BEFORE INSERT ON {table}
FOR EACH ROW EXECUTE FUNCTION refuse_for_the_test();
"""
REFUSE_SQLITE = """
CREATE TRIGGER refuse_for_the_test BEFORE INSERT ON {table}
BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;
"""


@pytest.fixture
def dags(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "audited.py").write_text(DAG_SOURCE)
    return folder


@pytest.fixture
def env(redis_url: str, database_url: str, dags: Path) -> dict[str, str]:
    return {
        "BEATFLOW_BROKER_URL": redis_url,
        "BEATFLOW_DATABASE_URL": database_url,
        "BEATFLOW_DAGS_FOLDER": str(dags),
        "BEATFLOW_QUEUES": "audited",
    }


@pytest.fixture
def app(env: dict[str, str]) -> Iterator[Celery]:
    settings = Settings.from_env(env)
    Store.from_settings(settings).upgrade()
    made = create_app(settings)
    yield made
    made.close()


@pytest.fixture
def runtime(app: Celery) -> Runtime:
    return runtime_of(app)


def refuse_inserts(database_url: str, table: str) -> None:
    """Make the database itself refuse every row inserted into ``table`` (a failure the store
    cannot see coming: it happens inside the statement)."""
    engine = sa.create_engine(database_url)
    script = REFUSE_SQLITE if is_sqlite(database_url) else REFUSE_PG
    try:
        with engine.begin() as conn:
            if is_sqlite(database_url):
                conn.exec_driver_sql(script.format(table=table))
            else:
                conn.execute(sa.text(script.format(table=table)))
    finally:
        engine.dispose()


def test_a_trigger_by_an_operator_is_audited_and_one_by_code_is_not(runtime: Runtime) -> None:
    run = trigger_dag(
        runtime, "audited", run_id="by-alice", conf={}, actor="alice", reason="a rerun"
    )
    trigger_dag(runtime, "audited", run_id="by-code")
    [record] = runtime.store.list_audit("audited")
    assert (record.actor, record.action, record.run_id) == ("alice", "trigger", run.run_id)
    assert record.detail == {"conf": {}, "reason": "a rerun"}


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_on_postgresql_a_run_and_its_audit_record_are_written_in_one_transaction(
    runtime: Runtime, database_url: str
) -> None:
    """Both rows carry the id of the transaction that wrote them: the same one."""
    trigger_dag(runtime, "audited", run_id="one-statement", actor="alice")
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            run_xid = conn.execute(
                sa.text("SELECT xmin::text FROM dag_runs WHERE run_id = 'one-statement'")
            ).scalar_one()
            audit_xid = conn.execute(
                sa.text("SELECT xmin::text FROM audit_events WHERE run_id = 'one-statement'")
            ).scalar_one()
    finally:
        engine.dispose()
    assert run_xid == audit_xid


def test_a_followed_trigger_is_audited_in_the_transaction_of_its_run(
    runtime: Runtime, database_url: str
) -> None:
    refuse_inserts(database_url, "audit_events")
    with pytest.raises(BeatflowError, match="refused by the test"):
        trigger_and_follow(runtime, "audited", run_id="followed", actor="bob", timeout=1.0)
    assert runtime.store.get_dag_run("audited", "followed") is None


def test_a_trigger_whose_run_cannot_be_written_leaves_no_audit_record(
    runtime: Runtime, database_url: str
) -> None:
    refuse_inserts(database_url, "dag_runs")
    with pytest.raises(BeatflowError, match="refused by the test"):
        trigger_dag(runtime, "audited", run_id="refused", actor="alice")
    assert runtime.store.list_audit() == []


def test_an_audit_record_that_cannot_be_written_leaves_no_run_and_sends_nothing(
    runtime: Runtime, database_url: str, redis_url: str
) -> None:
    refuse_inserts(database_url, "audit_events")
    with pytest.raises(BeatflowError, match="refused by the test"):
        trigger_dag(runtime, "audited", run_id="unaudited", actor="alice")
    assert runtime.store.get_dag_run("audited", "unaudited") is None
    assert sent_run_ids(redis_url, "audited", "audited.first") == []
    # a trigger with no one to audit (the beat, code) is not held up by the audit table
    assert trigger_dag(runtime, "audited", run_id="by-code").run_id == "by-code"


def beatflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    out = run_beatflow(env, *args)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_operator_verb_from_the_cli_is_audited_as_the_os_user(
    runtime: Runtime, env: dict[str, str]
) -> None:
    store = runtime.store
    beatflow(env, "dags", "trigger", "audited", "--run-id", "cli-run")
    beatflow(env, "dags", "pause", "audited")
    beatflow(env, "dags", "unpause", "audited")
    beatflow(
        env, "dags", "backfill", "audited", "--start", "2026-01-01", "--end", "2026-01-01T02:00"
    )
    # a failed task run (by hand: no worker here) to clear, then to replay as a dead letter
    beatflow(env, "runs", "mark", "audited", "cli-run", "--task", "first", "--state", "failed")
    beatflow(env, "runs", "clear", "audited", "cli-run", "--only-failed", "--reason", "retry")
    beatflow(env, "runs", "mark", "audited", "cli-run", "--task", "first", "--state", "failed")
    [failed] = [t for t in store.get_task_runs("audited", "cli-run") if t.task_id == "first"]
    letter = store.add_dead_letter(
        dedupe_key=failed.dedupe_key,
        dag_id="audited",
        run_id="cli-run",
        task_id="first",
        map_index=-1,
        args={},
        conf={},
        error="failed by hand",
        traceback=None,
        tries=1,
    )
    beatflow(env, "dlq", "replay", str(letter))
    beatflow(env, "runs", "cancel", "audited", "cli-run", "--reason", "enough")
    beatflow(env, "dlq", "purge", "audited", "--yes")
    beatflow(env, "db", "prune", "--older-than", "3650d")

    records = store.list_audit(limit=100)
    assert sorted(r.action for r in records) == sorted(
        [
            "trigger",
            "pause",
            "unpause",
            "backfill",
            "mark",
            "clear",
            "mark",
            "replay",
            "cancel",
            "purge",
            "prune",
        ]
    )
    assert {r.actor for r in records} == {f"cli:{getpass.getuser()}"}
    by_action = {r.action: r for r in records}
    assert by_action["trigger"].run_id == "cli-run"
    assert by_action["backfill"].detail["runs"] == 3
    assert by_action["clear"].detail["reason"] == "retry"
    assert by_action["replay"].detail == {"dead_letter": letter}
    assert by_action["purge"].detail["deleted"] == 1
    assert by_action["prune"].detail["deleted"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_each_cli_verb_records_the_actor_and_reason_it_is_given(
    runtime: Runtime, env: dict[str, str]
) -> None:
    who = ("--actor", "ops:carol")
    beatflow(env, "dags", "trigger", "audited", "--run-id", "r", *who, "--reason", "why trigger")
    beatflow(env, "dags", "pause", "audited", *who, "--reason", "why pause")
    beatflow(env, "dags", "unpause", "audited", *who, "--reason", "why unpause")
    window = ("--start", "2026-01-01", "--end", "2026-01-01")
    beatflow(env, "dags", "backfill", "audited", *window, *who, "--reason", "why backfill")
    beatflow(env, "dlq", "purge", "audited", "--yes", *who, "--reason", "why purge")
    beatflow(env, "db", "prune", "--older-than", "3650d", *who, "--reason", "why prune")

    records = runtime.store.list_audit(limit=100)
    assert sorted((r.action, r.actor, r.detail["reason"]) for r in records) == sorted(
        (action, "ops:carol", f"why {action}")
        for action in ("trigger", "pause", "unpause", "backfill", "purge", "prune")
    )
