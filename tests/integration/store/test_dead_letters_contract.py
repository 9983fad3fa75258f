"""Store contract, dead letters: add, list, show, mark replayed, purge, count."""

from __future__ import annotations

from typing import Any

import pytest

from beatflow.errors import StoreError
from beatflow.store import DeadLetterDraft, Store


def add(store: Store, dag_id: str = "etl", task_id: str = "load", **overrides: Any) -> int:
    fields: dict[str, Any] = {
        "dedupe_key": f"{dag_id}/r1/{task_id}",
        "dag_id": dag_id,
        "run_id": "r1",
        "task_id": task_id,
        "map_index": -1,
        "args": {"rows": [1, 2]},
        "conf": {"day": "2026-01-01"},
        "error": "ValueError: bad row",
        "traceback": "Traceback (most recent call last): …",
        "tries": 3,
    }
    fields.update(overrides)
    return store.add_dead_letter(**fields)


def test_a_dead_letter_keeps_everything_needed_to_replay_it(store: Store) -> None:
    letter_id = add(store, map_index=4)
    letter = store.get_dead_letter(letter_id)
    assert letter is not None
    assert (letter.id, letter.dedupe_key, letter.dag_id, letter.run_id, letter.task_id) == (
        letter_id,
        "etl/r1/load",
        "etl",
        "r1",
        "load",
    )
    assert letter.map_index == 4
    assert letter.args == {"rows": [1, 2]} and letter.conf == {"day": "2026-01-01"}
    assert letter.error == "ValueError: bad row" and letter.traceback
    assert letter.tries == 3
    assert letter.created_at.tzinfo is not None and letter.replayed_at is None
    assert store.get_dead_letter(letter_id + 1000) is None


def test_dead_letters_list_newest_first_by_dag_and_hide_replayed_ones(store: Store) -> None:
    first = add(store, task_id="a")
    second = add(store, task_id="b")
    other = add(store, dag_id="other")
    assert [d.id for d in store.list_dead_letters()] == [other, second, first]
    assert [d.id for d in store.list_dead_letters("etl")] == [second, first]
    assert [d.id for d in store.list_dead_letters(limit=1)] == [other]
    assert store.count_dead_letters() == 3

    store.mark_dead_letter_replayed(first)
    replayed = store.get_dead_letter(first)
    assert replayed is not None and replayed.replayed_at is not None
    store.mark_dead_letter_replayed(first)  # once: the first stamp stays
    assert store.get_dead_letter(first) == replayed
    assert [d.id for d in store.list_dead_letters("etl")] == [second]
    assert [d.id for d in store.list_dead_letters("etl", include_replayed=True)] == [second, first]
    assert store.count_dead_letters() == 2


def test_purging_dead_letters_deletes_one_dag_or_all_and_counts_them(store: Store) -> None:
    add(store, task_id="a")
    add(store, task_id="b")
    add(store, dag_id="other")
    assert store.purge_dead_letters("etl") == 2
    assert [d.dag_id for d in store.list_dead_letters()] == ["other"]
    assert store.purge_dead_letters() == 1
    assert store.count_dead_letters() == 0
    assert store.purge_dead_letters() == 0


def test_dead_letter_args_must_be_json(store: Store) -> None:
    with pytest.raises(StoreError, match="args of the dead letter"):
        add(store, args={"x": object()})
    assert store.count_dead_letters() == 0


def _claimed(store: Store, key: str = "etl/r9/load") -> str:
    claim = store.claim_task_run(
        key, dag_id="etl", run_id="r9", task_id="load", map_index=-1, worker="w1"
    )
    assert claim.token is not None
    return claim.token


LETTER = DeadLetterDraft(args={"run_id": "r9", "map_index": -1}, conf={"day": 1}, tries=2)


def test_a_task_run_failed_for_good_and_its_dead_letter_are_written_together(store: Store) -> None:
    token = _claimed(store)
    # a stale token writes neither the row nor the letter
    assert not store.finish_task_run(
        "etl/r9/load", "stale", state="failed", error="x", letter=LETTER
    )
    assert store.list_dead_letters("etl") == []
    assert store.finish_task_run(
        "etl/r9/load", token, state="failed", error="ValueError: no", traceback="tb", letter=LETTER
    )
    row = store.get_task_run("etl/r9/load")
    [letter] = store.list_dead_letters("etl")
    assert row is not None and row.state == "failed"
    assert (letter.dedupe_key, letter.run_id, letter.task_id, letter.map_index) == (
        "etl/r9/load", "r9", "load", -1
    )  # fmt: skip
    assert (letter.args, letter.conf, letter.tries, letter.error) == (
        LETTER.args, LETTER.conf, 2, "ValueError: no"
    )  # fmt: skip


def test_a_letter_that_cannot_be_written_leaves_the_task_run_unfailed(store: Store) -> None:
    token = _claimed(store)
    bad = DeadLetterDraft(args={}, conf={"not json": object()}, tries=1)
    with pytest.raises(StoreError, match="not JSON"):
        store.finish_task_run("etl/r9/load", token, state="failed", error="x", letter=bad)
    row = store.get_task_run("etl/r9/load")
    assert row is not None and row.state == "running"  # one transaction: nothing was written
    with pytest.raises(StoreError, match="not JSON"):
        store.fail_task_run(
            "etl/r9/load", dag_id="etl", run_id="r9", task_id="load", error="x", letter=bad
        )
    row = store.get_task_run("etl/r9/load")
    assert row is not None and row.state == "running"
    assert store.list_dead_letters("etl") == []


def test_fail_task_run_writes_its_letter_once_and_never_for_a_final_row(store: Store) -> None:
    ident = {"dag_id": "etl", "run_id": "r9", "task_id": "load"}
    # no row yet (a message this worker cannot run): the row is inserted failed, with its letter
    assert store.fail_task_run("etl/r9/load", error="skew", letter=LETTER, **ident)
    assert not store.fail_task_run("etl/r9/load", error="skew", letter=LETTER, **ident)
    assert len(store.list_dead_letters("etl")) == 1
    # a decided failure (a segment that cannot expand) likewise, through set_task_state
    assert store.set_task_state(
        "etl/r9/next", dag_id="etl", run_id="r9", task_id="next", state="failed", error="skew",
        letter=LETTER,
    )  # fmt: skip
    assert sorted(d.dedupe_key for d in store.list_dead_letters("etl")) == [
        "etl/r9/load", "etl/r9/next"
    ]  # fmt: skip
    with pytest.raises(StoreError, match="only a failed task run"):
        store.set_task_state(
            "etl/r9/skip", dag_id="etl", run_id="r9", task_id="skip", state="skipped",
            letter=LETTER,
        )  # fmt: skip
