"""Store contract, task runs: the claim protocol (run / done / held / takeover), lease renewal,
stale tokens, result validation, states decided without running, replay resets."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from beatflow.errors import BeatflowError, ResultError, StoreError
from beatflow.store import Claim, Store
from tests.integration.store.conftest import MakeStore

KEY = "etl/r1/load"


def claim(
    store: Store, key: str = KEY, *, worker: str = "w1", task_id: str = "load", map_index: int = -1
) -> Claim:
    return store.claim_task_run(
        key,
        dag_id="etl",
        run_id="r1",
        task_id=task_id,
        map_index=map_index,
        worker=worker,
        celery_task_id=f"celery-{worker}",
    )


def wait_for(condition: Callable[[], Any], *, timeout: float = 30.0) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(0.05)


def test_the_first_claim_runs_with_a_fresh_lease(store: Store) -> None:
    before = datetime.now(UTC)
    first = claim(store)
    assert first.outcome == "run" and first.token
    record = first.record
    assert (record.state, record.try_number, record.worker) == ("running", 1, "w1")
    assert record.celery_task_id == "celery-w1"
    assert record.lease_expires_at is not None
    assert record.lease_expires_at >= before + timedelta(seconds=store.lease_seconds)
    assert record.started_at is not None and record.ended_at is None
    assert store.get_task_run(KEY) == record


def test_a_second_claim_while_the_lease_is_live_is_held_and_names_the_holder(
    store: Store,
) -> None:
    first = claim(store, worker="w1")
    second = claim(store, worker="w2")
    assert second.outcome == "held" and second.token is None
    assert second.record.worker == "w1"
    assert store.finish_task_run(KEY, first.token or "", state="success", result=1)


def test_a_claim_after_success_is_done_and_returns_the_stored_result(store: Store) -> None:
    first = claim(store)
    assert store.finish_task_run(KEY, first.token or "", state="success", result={"rows": [1, 2]})
    again = claim(store, worker="w2")
    assert again.outcome == "done" and again.token is None
    assert again.record.result == {"rows": [1, 2]}
    assert again.record.state == "success" and again.record.try_number == 1
    assert again.record.duration_seconds is not None and again.record.duration_seconds >= 0


def test_a_claim_after_failure_is_done_and_carries_the_error(store: Store) -> None:
    first = claim(store)
    assert store.finish_task_run(
        KEY, first.token or "", state="failed", error="ValueError: bad row", traceback="Traceback…"
    )
    again = claim(store)
    assert again.outcome == "done"
    assert (again.record.state, again.record.error) == ("failed", "ValueError: bad row")
    assert again.record.traceback == "Traceback…" and again.record.result is None


def test_up_for_retry_is_claimed_again_as_the_next_try(store: Store) -> None:
    first = claim(store, worker="w1")
    assert store.finish_task_run(KEY, first.token or "", state="up_for_retry", error="timeout")
    retry = claim(store, worker="w2")
    assert retry.outcome == "run" and retry.token not in (None, first.token)
    assert (retry.record.try_number, retry.record.state, retry.record.worker) == (
        2,
        "running",
        "w2",
    )
    assert retry.record.error is None  # the new try starts clean
    assert store.get_task_run(KEY) == retry.record


def test_an_expired_lease_is_taken_over_as_a_new_try_and_the_stale_worker_is_refused(
    make_store: MakeStore,
) -> None:
    store = make_store(lease_seconds=1.0)
    dead = claim(store, worker="dead-worker")
    assert claim(store, worker="w2").outcome == "held"

    takeover = wait_for(lambda: (c := claim(store, worker="w2")).outcome == "run" and c)
    assert takeover.token != dead.token
    assert (takeover.record.try_number, takeover.record.worker) == (2, "w2")
    assert store.count_stuck_task_runs() == 0

    # the first worker wakes up: it can neither renew nor overwrite its successor
    assert not store.renew_lease(KEY, dead.token or "")
    assert not store.finish_task_run(KEY, dead.token or "", state="success", result="stale")
    assert store.finish_task_run(KEY, takeover.token or "", state="success", result="fresh")
    final = store.get_task_run(KEY)
    assert final is not None and (final.result, final.worker) == ("fresh", "w2")


def test_renewing_the_lease_keeps_the_task_run_held(make_store: MakeStore) -> None:
    store = make_store(lease_seconds=1.0)
    held = claim(store)
    first_expiry = held.record.lease_expires_at
    assert first_expiry is not None

    def renew() -> datetime:
        assert store.renew_lease(KEY, held.token or "")
        record = store.get_task_run(KEY)
        assert record is not None and record.lease_expires_at is not None
        return record.lease_expires_at

    # renew until the original expiry is behind us: a condition with a deadline, polled
    wait_for(lambda: renew() and datetime.now(UTC) > first_expiry)
    renewed = renew()
    assert renewed > first_expiry  # each renewal pushed the expiry a lease past its own time
    taken = claim(store, worker="w2")
    # held, unless this machine stalled for a whole lease between the two statements (then the
    # lease did lapse by the clock: a takeover is right, and nothing else is checked)
    assert taken.outcome == "held" or datetime.now(UTC) >= renewed, taken.outcome
    record = store.get_task_run(KEY)
    assert record is not None and record.lease_expires_at is not None
    assert record.lease_expires_at > first_expiry


def test_a_stale_or_unknown_token_cannot_finish_or_renew(store: Store) -> None:
    held = claim(store)
    assert not store.finish_task_run(KEY, "not-the-token", state="success", result=1)
    assert not store.renew_lease(KEY, "not-the-token")
    assert not store.renew_lease("no/such/key", held.token or "")
    assert store.finish_task_run(KEY, held.token or "", state="success", result=1)
    # finishing twice, even with the right token, writes nothing
    assert not store.finish_task_run(KEY, held.token or "", state="failed", error="late")
    record = store.get_task_run(KEY)
    assert record is not None and record.state == "success"


def test_stuck_task_runs_are_the_running_ones_with_an_expired_lease(store: Store) -> None:
    held = claim(store)
    claim(store, "etl/r1/other", task_id="other")
    assert held.record.lease_expires_at is not None
    assert store.count_stuck_task_runs() == 0
    later = held.record.lease_expires_at + timedelta(seconds=1)
    assert store.count_stuck_task_runs(now=later) == 2
    store.finish_task_run(KEY, held.token or "", state="success")
    assert store.count_stuck_task_runs(now=later) == 1


def test_a_result_that_is_not_json_raises_result_error_and_writes_nothing(store: Store) -> None:
    held = claim(store)
    with pytest.raises(ResultError) as caught:
        store.finish_task_run(KEY, held.token or "", state="success", result={"at": object()})
    message = str(caught.value)
    assert KEY in message and "dict" in message and "not JSON-serialisable" in message
    assert "put big data in object storage and return its key" in message
    assert caught.value.dedupe_key == KEY
    with pytest.raises(ResultError, match="not JSON-serialisable"):
        store.finish_task_run(KEY, held.token or "", state="success", result=float("nan"))
    record = store.get_task_run(KEY)
    assert record is not None and record.state == "running"  # still ours to finish as failed
    assert store.finish_task_run(KEY, held.token or "", state="failed", error="ResultError")


def test_an_oversized_result_raises_result_error_naming_size_and_limit(
    make_store: MakeStore,
) -> None:
    store = make_store(result_max_bytes=1000)
    held = claim(store)
    with pytest.raises(ResultError) as caught:
        store.finish_task_run(KEY, held.token or "", state="success", result="x" * 1000)
    error = caught.value
    assert (error.size, error.limit) == (1002, 1000)
    assert "1002 bytes" in str(error) and "1000 bytes" in str(error)
    assert "put big data in object storage and return its key" in str(error)
    assert store.finish_task_run(KEY, held.token or "", state="success", result="x" * 998)


def test_json_results_round_trip_including_none(store: Store) -> None:
    values: list[Any] = [None, 0, 1.5, "text", True, [1, "a", None], {"nested": {"k": [1]}}]
    for i, value in enumerate(values):
        key = f"etl/r1/t{i}"
        held = claim(store, key, task_id=f"t{i}")
        assert store.finish_task_run(key, held.token or "", state="success", result=value)
        record = store.get_task_run(key)
        assert record is not None and record.result == value


def test_finishing_with_a_state_that_is_not_an_outcome_raises(store: Store) -> None:
    held = claim(store)
    with pytest.raises(StoreError, match="cannot finish task run"):
        store.finish_task_run(KEY, held.token or "", state="upstream_failed")


def test_a_claimed_task_run_that_skipped_itself_is_final_with_its_reason(store: Store) -> None:
    held = claim(store)
    assert store.finish_task_run(KEY, held.token or "", state="skipped", error="no new files")
    record = store.get_task_run(KEY)
    assert record is not None and (record.state, record.error) == ("skipped", "no new files")
    assert not store.finish_task_run(KEY, held.token or "", state="success", result=1)  # final


def test_set_task_state_records_a_decision_once_and_never_overwrites(store: Store) -> None:
    assert store.set_task_state(
        "etl/r1/report",
        dag_id="etl",
        run_id="r1",
        task_id="report",
        state="upstream_failed",
        error="upstream load failed",
    )
    assert not store.set_task_state(
        "etl/r1/report", dag_id="etl", run_id="r1", task_id="report", state="skipped"
    )
    record = store.get_task_run("etl/r1/report")
    assert record is not None
    assert (record.state, record.try_number, record.error) == (
        "upstream_failed",
        0,
        "upstream load failed",
    )
    assert claim(store, "etl/r1/report", task_id="report").outcome == "done"

    held = claim(store)  # a running task run is not overwritten by a decision either
    assert not store.set_task_state(KEY, dag_id="etl", run_id="r1", task_id="load", state="skipped")
    assert store.finish_task_run(KEY, held.token or "", state="success")
    with pytest.raises(StoreError, match="without running it"):
        store.set_task_state("k", dag_id="etl", run_id="r1", task_id="t", state="success")


def test_task_runs_of_a_dag_run_come_ordered_by_start_task_and_map_index(store: Store) -> None:
    for index in (2, 0, 1):
        claim(store, f"etl/r1/fan[{index}]", task_id="fan", map_index=index)
    claim(store, "etl/r1/a", task_id="a")
    store.set_task_state("etl/r1/skipped", dag_id="etl", run_id="r1", task_id="b", state="skipped")
    store.claim_task_run("etl/r2/a", dag_id="etl", run_id="r2", task_id="a")
    runs = store.get_task_runs("etl", "r1")
    assert [(r.task_id, r.map_index) for r in runs] == [
        ("fan", 2),
        ("fan", 0),
        ("fan", 1),
        ("a", -1),
        ("b", -1),
    ]
    assert store.get_task_runs("etl", "missing") == []
    assert store.get_task_run("no/such/key") is None


def test_reset_turns_a_finished_task_run_into_the_next_try_under_the_same_key(
    store: Store,
) -> None:
    held = claim(store)
    store.finish_task_run(KEY, held.token or "", state="failed", error="boom")
    assert store.reset_task_run(KEY)
    assert not store.reset_task_run(KEY)  # already waiting for its next try
    record = store.get_task_run(KEY)
    assert record is not None and record.state == "up_for_retry"
    replay = claim(store, worker="w9")
    assert replay.outcome == "run" and replay.record.try_number == 2
    assert replay.record.error is None
    assert not store.reset_task_run(KEY)  # running: not resettable
    assert not store.reset_task_run("no/such/key")


def test_task_runs_of_a_dag_run_can_be_narrowed_to_some_tasks(store: Store) -> None:
    for task_id in ("extract", "transform", "load"):
        claim(store, f"etl/r1/{task_id}", task_id=task_id)
    narrowed = store.get_task_runs("etl", "r1", task_ids={"load", "extract"})
    assert sorted(r.task_id for r in narrowed) == ["extract", "load"]
    assert store.get_task_runs("etl", "r1", task_ids=[]) == []


# ---- failures always recordable, text sanitised, the database's clock ------------------------


def test_a_claimed_task_run_can_always_be_marked_failed(store: Store) -> None:
    held = claim(store)
    assert held.outcome == "run"
    assert store.fail_task_run(
        KEY, dag_id="etl", run_id="r1", task_id="load", error="worker broke", traceback="tb"
    )
    row = store.get_task_run(KEY)
    assert row is not None and (row.state, row.error) == ("failed", "worker broke")
    assert not store.finish_task_run(KEY, held.token or "", state="success", result=1)
    # a final row is never changed; a missing one is inserted failed
    assert not store.fail_task_run(KEY, dag_id="etl", run_id="r1", task_id="load", error="again")
    assert store.fail_task_run(
        "etl/r1/other", dag_id="etl", run_id="r1", task_id="other", error="x"
    )
    other = store.get_task_run("etl/r1/other")
    assert other is not None and other.state == "failed"


def test_errors_with_nul_bytes_or_of_any_size_are_stored_sanitised(store: Store) -> None:
    held = claim(store)
    huge = "y" * 50_000
    assert store.finish_task_run(
        KEY, held.token or "", state="failed", error="bad \x00 byte" + huge, traceback="t\x00b"
    )
    row = store.get_task_run(KEY)
    assert row is not None and row.state == "failed"
    assert row.error is not None and "\x00" not in row.error and row.error.startswith("bad \\x00")
    assert len(row.error) <= 10_000 and "more characters cut" in row.error
    assert row.traceback == "t\\x00b"


def test_a_lease_is_set_and_compared_on_the_database_clock_not_the_workers(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(lease_seconds=30.0)
    if store.dialect != "postgresql":
        pytest.skip("SQLite is embedded: the host's clock is the database's clock")
    import beatflow.store.task_runs as task_runs_module

    # this worker's clock is an hour behind: its lease must not be born expired
    skewed = datetime.now(UTC) - timedelta(hours=1)
    monkeypatch.setattr(task_runs_module, "utcnow", lambda: skewed)
    first = claim(store, worker="slow-clock")
    assert first.outcome == "run"
    assert first.record.lease_expires_at is not None
    assert first.record.lease_expires_at > datetime.now(UTC) + timedelta(seconds=20)
    monkeypatch.undo()
    assert claim(store, worker="w2").outcome == "held"  # not taken over: the lease is live


def test_a_task_run_done_by_another_run_is_recorded_for_this_run_with_a_pointer(
    store: Store,
) -> None:
    shared = "etl/acme/charge"
    first = store.claim_task_run(shared, dag_id="etl", run_id="r1", task_id="charge")
    assert store.finish_task_run(shared, first.token or "", state="success", result="charged")
    done = store.claim_task_run(shared, dag_id="etl", run_id="r2", task_id="charge")
    assert done.outcome == "done" and done.record.run_id == "r1"
    mine = store.record_deduped("etl/r2/charge", run_id="r2", source=done.record)
    assert (mine.run_id, mine.state, mine.result, mine.deduped_from) == (
        "r2",
        "success",
        "charged",
        "r1",
    )
    assert [t.task_id for t in store.get_task_runs("etl", "r2")] == ["charge"]


def test_a_map_count_is_stored_out_of_band_and_cleared_by_a_new_try(store: Store) -> None:
    held = claim(store)
    assert store.finish_task_run(KEY, held.token or "", state="success", result=None, map_count=3)
    row = store.get_task_run(KEY)
    assert row is not None and (row.map_count, row.result) == (3, None)
    assert store.reset_task_run(KEY)
    again = claim(store)
    assert again.outcome == "run" and again.record.map_count is None


# ---- dead-letter replay: atomic, only from a failed row ---------------------------------------


def _dead_letter(store: Store, key: str = KEY) -> int:
    return store.add_dead_letter(
        dedupe_key=key,
        dag_id="etl",
        run_id="r1",
        task_id="load",
        map_index=-1,
        args={"run_id": "r1"},
        conf={},
        error="boom",
        traceback=None,
        tries=1,
    )


def test_replaying_a_dead_letter_resets_its_failed_task_run_and_downstream_at_once(
    store: Store,
) -> None:
    held = claim(store)
    assert store.finish_task_run(KEY, held.token or "", state="failed", error="boom")
    store.set_task_state(
        "etl/r1/after", dag_id="etl", run_id="r1", task_id="after", state="upstream_failed"
    )
    letter = _dead_letter(store)
    store.start_replay(letter, {"after"})
    replayed = store.get_task_run(KEY)
    assert replayed is not None and replayed.state == "cleared"
    # its retry policy starts again: the tries made so far are counted as before the replay
    assert replayed.tries_before == replayed.try_number == 1
    assert store.get_task_run("etl/r1/after").state == "cleared"  # type: ignore[union-attr]
    assert store.get_dead_letter(letter).replayed_at is not None  # type: ignore[union-attr]
    with pytest.raises(BeatflowError, match="replayed already"):
        store.start_replay(letter, {"after"})


def test_a_dead_letter_whose_task_run_succeeded_since_is_not_replayed_and_changes_nothing(
    store: Store,
) -> None:
    held = claim(store)
    letter = _dead_letter(store)  # e.g. written by a stale worker, or the run was fixed since
    assert store.finish_task_run(KEY, held.token or "", state="success", result="good")
    with pytest.raises(BeatflowError, match="is success, not failed"):
        store.start_replay(letter)
    row = store.get_task_run(KEY)
    assert row is not None and (row.state, row.result) == ("success", "good")
    assert store.get_dead_letter(letter).replayed_at is None  # type: ignore[union-attr]
