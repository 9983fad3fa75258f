"""Store contract, the operator's verbs keep their promises: a clear or a replay starts a fresh
round of tries (``tries_before``); a dead letter that no longer stands (its run marked, its task
cleared, a newer letter of the same task run) is closed with who and why, and replaying it is
refused, changing nothing; a verb's audit record is written in its change's transaction."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from beatflow.errors import BeatflowError, DeadLetterStaleError
from beatflow.store import AuditNote, DeadLetterDraft, Store
from tests.integration.store.test_audit_contract import refuse_audit_records

T0 = datetime(2026, 3, 1, tzinfo=UTC)
KEY = "etl/r1/load"
LETTER = DeadLetterDraft(args={"run_id": "r1", "map_index": -1}, conf={}, tries=3)


def fail_load(store: Store, tries: int = 3) -> None:
    """The task run ``load`` of etl/r1 fails for good after ``tries`` tries, with its letter."""
    for n in range(1, tries + 1):
        held = store.claim_task_run(KEY, dag_id="etl", run_id="r1", task_id="load")
        assert held.record.try_number == held.record.tries_before + n
        state = "failed" if n == tries else "up_for_retry"
        letter = LETTER if state == "failed" else None
        assert store.finish_task_run(
            KEY, held.token or "", state=state, error="boom", letter=letter
        )


def letters(store: Store) -> list[int]:
    return [d.id for d in store.list_dead_letters("etl", include_replayed=True)]


@pytest.fixture
def run(store: Store) -> Store:
    store.create_dag_run("etl", "r1", logical_date=T0)
    store.start_queued_dag_runs("etl", 1)
    return store


def test_a_clear_starts_a_fresh_round_of_tries_and_closes_the_letter_it_makes_stale(
    run: Store,
) -> None:
    store = run
    fail_load(store)
    [letter] = letters(store)
    note = AuditNote("alice", "clear", {"reason": "fixed"})
    reset = store.reset_task_runs("etl", "r1", {"load"}, note="cleared by alice", audit=note)
    assert [t.dedupe_key for t in reset] == [KEY]
    row = store.get_task_run(KEY)
    assert row is not None and (row.state, row.try_number, row.tries_before) == ("cleared", 3, 3)
    assert row.error == "cleared by alice"
    closed = store.get_dead_letter(letter)
    assert closed is not None and closed.closed_at is not None
    assert closed.closed_reason == "cleared by alice" and not closed.is_open
    [audit] = store.list_audit("etl", "r1")
    assert audit.detail["task_runs_cleared"] == [KEY]
    assert audit.detail["dead_letters_closed"] == [letter]
    # the next round: tries 4, 5, 6 (three, as retries=2 promises), then a new letter
    fail_load(store)
    row = store.get_task_run(KEY)
    assert row is not None and (row.try_number, row.tries_since_clear) == (6, 3)
    with pytest.raises(DeadLetterStaleError, match="cleared by alice"):
        store.start_replay(letter)


def test_a_newer_letter_of_the_same_task_run_makes_the_older_one_stale(store: Store) -> None:
    first = store.add_dead_letter(
        dedupe_key=KEY, dag_id="etl", run_id="r1", task_id="load", map_index=-1, args={},
        conf={}, error="first", traceback=None, tries=1,
    )  # fmt: skip
    other = store.add_dead_letter(
        dedupe_key="etl/r1/other", dag_id="etl", run_id="r1", task_id="other", map_index=-1,
        args={}, conf={}, error="other", traceback=None, tries=1,
    )  # fmt: skip
    second = store.add_dead_letter(
        dedupe_key=KEY, dag_id="etl", run_id="r1", task_id="load", map_index=-1, args={},
        conf={}, error="second", traceback=None, tries=1,
    )  # fmt: skip
    stale = store.get_dead_letter(first)
    assert (
        stale is not None
        and stale.closed_reason == f"superseded by dead letter {second} of the same task run"
    )
    assert [d.id for d in store.list_dead_letters("etl")] == [second, other]
    assert store.count_dead_letters() == 2


def test_marking_a_run_closes_its_letters_and_a_replay_of_one_is_refused_changing_nothing(
    run: Store,
) -> None:
    store = run
    fail_load(store)
    [letter] = letters(store)
    ended, cancelled = store.end_dag_run_by_hand(
        "etl", "r1", to="success", from_states={"running", "failed"},
        reason="marked success by bob: done by hand", audit=AuditNote("bob", "mark", {}),
        close_letters=True,
    )  # fmt: skip
    assert ended is not None and ended.state == "success" and cancelled == []
    with pytest.raises(DeadLetterStaleError, match="marked success by bob: done by hand"):
        store.start_replay(letter)
    closed = store.get_dead_letter(letter)
    assert closed is not None and closed.replayed_at is None
    assert store.get_task_run(KEY).state == "failed"  # type: ignore[union-attr]
    assert store.get_dag_run("etl", "r1").state == "success"  # type: ignore[union-attr]
    [audit] = store.list_audit("etl", "r1")
    assert (audit.actor, audit.action, audit.detail["dead_letters_closed"]) == (
        "bob",
        "mark",
        [letter],
    )
    # a second mark to the same state moves nothing and writes nothing
    again = store.end_dag_run_by_hand(
        "etl", "r1", to="success", from_states={"running", "failed"}, reason="again",
        audit=AuditNote("bob", "mark", {}),
    )  # fmt: skip
    assert again == (None, []) and len(store.list_audit("etl", "r1")) == 1


def test_a_replay_is_audited_in_its_own_transaction(run: Store, database_url: str) -> None:
    store = run
    fail_load(store)
    [letter] = letters(store)
    refuse_audit_records(database_url)
    with pytest.raises(BeatflowError, match="refused by the test"):
        store.start_replay(letter, audit=AuditNote("carol", "replay", {}))
    # nothing of the replay stands without its audit record
    kept = store.get_dead_letter(letter)
    assert kept is not None and kept.is_open
    assert store.get_task_run(KEY).state == "failed"  # type: ignore[union-attr]


def test_cancel_mark_and_clear_are_audited_in_their_own_transaction(
    run: Store, database_url: str
) -> None:
    store = run
    store.claim_task_run(KEY, dag_id="etl", run_id="r1", task_id="load")
    refuse_audit_records(database_url)
    with pytest.raises(BeatflowError, match="refused by the test"):
        store.end_dag_run_by_hand(
            "etl", "r1", to="cancelled", from_states={"running"}, reason="cancelled by dan",
            audit=AuditNote("dan", "cancel", {}),
        )  # fmt: skip
    assert store.get_dag_run("etl", "r1").state == "running"  # type: ignore[union-attr]
    assert store.get_task_run(KEY).state == "running"  # type: ignore[union-attr]
    with pytest.raises(BeatflowError, match="refused by the test"):
        store.force_task_state(
            "etl", "r1", "load", state="success", note="marked", dedupe_key=KEY,
            audit=AuditNote("dan", "mark", {}),
        )  # fmt: skip
    assert store.get_task_run(KEY).state == "running"  # type: ignore[union-attr]
