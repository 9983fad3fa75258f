"""Store contract (SQLite and PostgreSQL) for the operator's verbs that take an ``audit`` note:
the change and its audit record commit together, or neither does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from beatflow.errors import BeatflowError
from beatflow.store import AuditNote, Store
from beatflow.store.engine import is_sqlite
from beatflow.store.records import ScheduledRunDraft
from tests.integration.store.conftest import MakeStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)
REFUSE_PG = """
CREATE FUNCTION refuse_audit_for_the_test() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
CREATE TRIGGER refuse_audit_for_the_test BEFORE INSERT ON audit_events
FOR EACH ROW EXECUTE FUNCTION refuse_audit_for_the_test();
"""
REFUSE_SQLITE = """
CREATE TRIGGER refuse_audit_for_the_test BEFORE INSERT ON audit_events
BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;
"""


def refuse_audit_records(database_url: str) -> None:
    """Make the database itself refuse every audit record (inside the insert statement)."""
    engine = sa.create_engine(database_url)
    try:
        with engine.begin() as conn:
            if is_sqlite(database_url):
                conn.exec_driver_sql(REFUSE_SQLITE)
            else:
                conn.execute(sa.text(REFUSE_PG))
    finally:
        engine.dispose()


def add_letter(store: Store, run_id: str) -> int:
    return store.add_dead_letter(
        dedupe_key=f"d/{run_id}/t",
        dag_id="d",
        run_id=run_id,
        task_id="t",
        map_index=-1,
        args={},
        conf={},
        error="boom",
        traceback=None,
        tries=1,
    )


def finished_run(store: Store, run_id: str) -> None:
    store.create_dag_run("d", run_id, logical_date=T0)
    store.start_queued_dag_runs("d", 1)
    assert store.transition_dag_run("d", run_id, to="success", from_states={"running"})


def drafts(*run_ids: str) -> list[ScheduledRunDraft]:
    return [
        ScheduledRunDraft("b", run_id, T0 + timedelta(hours=i), "backfill", {})
        for i, run_id in enumerate(run_ids)
    ]


def test_each_verb_writes_its_audit_record_with_its_change(make_store: MakeStore) -> None:
    store = make_store()
    store.set_paused("d", True, audit=AuditNote("alice", "pause", {"reason": "r1"}))
    add_letter(store, "r")
    assert store.purge_dead_letters("d", audit=AuditNote("bob", "purge", {"reason": "r2"})) == 1
    finished_run(store, "old")
    note = AuditNote("carol", "prune", {"reason": "r3"})
    assert store.prune(timedelta(0), batch_size=1, audit=note) == 1
    store.create_dag_runs(drafts("b1"))
    made = store.create_dag_runs(drafts("b1", "b2"), audit=AuditNote("dan", "backfill"))
    assert [new for _, new in made] == [False, True]

    assert store.is_paused("d")
    got = [(a.actor, a.action, a.dag_id, a.detail) for a in reversed(store.list_audit())]
    assert got == [
        ("alice", "pause", "d", {"reason": "r1"}),
        ("bob", "purge", "d", {"reason": "r2", "deleted": 1}),
        ("carol", "prune", None, {"reason": "r3", "deleted": 1}),
        ("dan", "backfill", "b", {"runs": 2, "created": 1}),
    ]


def test_a_refused_audit_record_leaves_no_change(make_store: MakeStore, database_url: str) -> None:
    store = make_store()
    add_letter(store, "r")
    finished_run(store, "old")
    refuse_audit_records(database_url)

    with pytest.raises(BeatflowError, match="refused by the test"):
        store.set_paused("d", True, audit=AuditNote("alice", "pause"))
    assert not store.is_paused("d")
    with pytest.raises(BeatflowError, match="refused by the test"):
        store.purge_dead_letters("d", audit=AuditNote("alice", "purge"))
    assert store.count_dead_letters() == 1
    with pytest.raises(BeatflowError, match="refused by the test"):
        store.prune(timedelta(0), audit=AuditNote("alice", "prune"))
    assert store.get_dag_run("d", "old") is not None
    with pytest.raises(BeatflowError, match="refused by the test"):
        store.create_dag_runs(drafts("b1", "b2"), audit=AuditNote("alice", "backfill"))
    assert store.list_dag_runs("b") == []
    # with no one to audit (code, the beat) the audit table holds nothing up
    store.set_paused("d", True)
    assert store.is_paused("d")
