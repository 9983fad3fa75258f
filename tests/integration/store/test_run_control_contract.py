"""Store contract (SQLite and PostgreSQL) for the run lifecycle: starting queued runs under a
limit with one winner, conditional transitions, the reconciler's reads, run-level task-run
changes, and the audit table."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from beatflow.errors import StoreError
from beatflow.store import AuditNote, Store
from tests.integration.store.conftest import MakeStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def test_racing_starters_start_each_queued_run_once_and_never_exceed_the_limit(
    make_store: MakeStore,
) -> None:
    store = make_store()
    for i in range(12):
        store.create_dag_run("d", f"r{i:02d}", logical_date=T0 + timedelta(hours=11 - i))
    started: list[str] = []
    gate = threading.Barrier(4)

    def starter(s: Store) -> None:
        gate.wait()
        for _ in range(20):
            started.extend(r.run_id for r in s.start_queued_dag_runs("d", 3))

    stores = [make_store() for _ in range(4)]
    threads = [threading.Thread(target=starter, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(started) == ["r09", "r10", "r11"]  # the three oldest logical dates, once each
    assert len(store.list_dag_runs("d", state="running")) == 3


def test_transitions_have_one_winner_and_a_requeue_clears_the_end(make_store: MakeStore) -> None:
    store = make_store()
    store.create_dag_run("d", "r", logical_date=T0)
    assert store.start_queued_dag_runs("d", 1)[0].run_id == "r"
    assert store.transition_dag_run("d", "r", to="failed", from_states={"running"}, reason="why")
    assert not store.transition_dag_run("d", "r", to="cancelled", from_states={"running"})
    run = store.get_dag_run("d", "r")
    assert run is not None and run.state == "failed" and run.failure_reason == "why"
    assert store.transition_dag_run("d", "r", to="queued", from_states={"failed"})
    run = store.get_dag_run("d", "r")
    assert run is not None and run.ended_at is None and run.failure_reason is None


def test_a_resume_is_recorded_once_per_seen_count(make_store: MakeStore) -> None:
    store = make_store()
    store.create_dag_run("d", "r", logical_date=T0)
    store.start_queued_dag_runs("d", 1)
    assert store.record_resume("d", "r", seen_count=0, not_before=timedelta(seconds=60))
    assert not store.record_resume("d", "r", seen_count=0, not_before=timedelta(seconds=60))
    run = store.get_dag_run("d", "r")
    assert run is not None and run.resume_count == 1
    # held off by its resume: not stalled again before resume_after
    assert store.stalled_dag_runs(timedelta(seconds=0), limit=10) == []


def test_a_running_run_with_a_live_task_run_is_not_stalled(make_store: MakeStore) -> None:
    store = make_store(lease_seconds=60)
    for run_id in ("busy", "silent"):
        store.create_dag_run("d", run_id, logical_date=T0)
    store.start_queued_dag_runs("d", 2)
    store.claim_task_run("d/busy/t", dag_id="d", run_id="busy", task_id="t")
    stalled = store.stalled_dag_runs(timedelta(seconds=0), limit=10)
    assert [r.run_id for r in stalled] == ["silent"]


def test_cancel_reset_and_force_change_only_the_task_runs_they_name(make_store: MakeStore) -> None:
    store = make_store()
    store.create_dag_run("d", "r", logical_date=T0)
    running = store.claim_task_run("d/r/a", dag_id="d", run_id="r", task_id="a")
    store.set_task_state("d/r/b", dag_id="d", run_id="r", task_id="b", state="upstream_failed")
    cancelled = store.cancel_task_runs("d", "r", reason="by test")
    assert [t.dedupe_key for t in cancelled] == ["d/r/a"]
    assert not store.finish_task_run("d/r/a", running.token or "", state="success")  # fenced
    reset = store.reset_task_runs("d", "r", {"a", "b"}, states={"upstream_failed"})
    assert [t.dedupe_key for t in reset] == ["d/r/b"]
    assert store.get_task_run("d/r/b").state == "cleared"  # type: ignore[union-attr]
    assert store.force_task_state("d", "r", "c", state="success", note="n", dedupe_key="d/r/c") == 1
    assert store.get_task_run("d/r/c").state == "success"  # type: ignore[union-attr]


def test_audit_records_are_listed_newest_first_and_filtered(make_store: MakeStore) -> None:
    store = make_store()
    store.record_audit("alice", "cancel", "d", "r1", {"reason": "x"})
    store.record_audit("bob", "pause", "d", None, {})
    store.record_audit("carol", "clear", "e", "r2", {"tasks": ["t"]})
    assert [a.actor for a in store.list_audit()] == ["carol", "bob", "alice"]
    assert [a.action for a in store.list_audit("d")] == ["pause", "cancel"]
    [only] = store.list_audit("d", "r1")
    assert only.detail == {"reason": "x"} and only.at.tzinfo is not None


def test_a_trigger_with_an_audit_note_writes_the_run_and_its_record_in_one_transaction(
    make_store: MakeStore,
) -> None:
    store = make_store()
    note = AuditNote("alice", "trigger", {"conf": {"n": 1}})
    triggered = store.create_and_start_dag_run("d", "r1", 1, audit=note)
    again = store.create_and_start_dag_run("d", "r1", 1, audit=AuditNote("bob", "trigger"))
    assert triggered.created and not again.created
    assert [r.run_id for r in triggered.started] == ["r1"]
    records = store.list_audit("d", "r1")
    assert [(a.actor, a.action, a.detail) for a in records] == [
        ("bob", "trigger", {}),
        ("alice", "trigger", {"conf": {"n": 1}}),
    ]
    assert store.list_audit("d", "r2") == []


def test_an_audit_note_that_cannot_be_written_leaves_no_run(make_store: MakeStore) -> None:
    store = make_store()
    bad = AuditNote("a", "trigger", {"x": object()})  # not JSON
    with pytest.raises(StoreError):
        store.create_and_start_dag_run("d", "r1", 1, audit=bad)
    assert store.get_dag_run("d", "r1") is None and store.list_audit() == []
