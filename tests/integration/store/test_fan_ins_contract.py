"""Store contract, a .map() expansion's fan-in (no chord): the statements that end an instance
count it, exactly one of them (the last) gets the canvas to continue, whatever the order, the
outcome or the concurrency; an expander that opens (or reopens) its fan-in counts the instances
already final."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from beatflow.store import DeadLetterDraft, Store
from tests.integration.store.conftest import MakeStore

CANVAS: dict[str, Any] = {"id": "expander-celery-id", "chain": [{"task": "next"}], "chord": None}


def key(i: int) -> str:
    return f"m/r1/each[{i}]"


def claim(store: Store, i: int, *, run_id: str = "r1") -> str:
    got = store.claim_task_run(
        f"m/{run_id}/each[{i}]", dag_id="m", run_id=run_id, task_id="each", map_index=i
    )
    assert got.outcome == "run" and got.token is not None
    return got.token


def finish(store: Store, i: int, token: str, state: str = "success", **kw: Any) -> Any:
    return store.finish_map_instance(key(i), token, state=state, **kw)


def test_the_last_instance_to_end_gets_the_canvas_and_no_other_does(store: Store) -> None:
    assert not store.open_fan_in("m", "r1", "each", 3, CANVAS)
    tokens = {i: claim(store, i) for i in range(3)}
    first = finish(store, 2, tokens[2], result=4)
    assert first.written and first.fan_in is None
    # a failure for good ends its instance too (the downstream's trigger rule decides)
    letter = DeadLetterDraft(args={"run_id": "r1", "map_index": 0}, conf={}, tries=1)
    failed = finish(store, 0, tokens[0], "failed", error="boom", letter=letter)
    assert failed.written and failed.fan_in is None
    assert store.fan_in_state("m", "r1", "each") == (2, 3)
    last = finish(store, 1, tokens[1], result=1)
    assert last.written and last.fan_in == CANVAS
    assert store.fan_in_state("m", "r1", "each") == (3, 3)


def test_a_retry_a_stale_token_or_a_lost_lease_counts_nothing(store: Store) -> None:
    store.open_fan_in("m", "r1", "each", 1, CANVAS)
    token = claim(store, 0)
    retry = finish(store, 0, token, "up_for_retry", error="flaky")
    assert retry.written and retry.fan_in is None
    assert store.fan_in_state("m", "r1", "each") == (0, 1)
    second = claim(store, 0)  # the retry's try
    stale = finish(store, 0, token, result="stale")
    assert not stale and stale.fan_in is None
    assert store.fan_in_state("m", "r1", "each") == (0, 1)
    done = finish(store, 0, second, result="ok")
    assert done.fan_in == CANVAS
    # the same instance again (a redelivery finds its row final and cannot finish it)
    assert not finish(store, 0, second, result="again")
    assert store.fan_in_state("m", "r1", "each") == (1, 1)


def test_an_instance_failed_around_its_task_counts_and_can_be_the_last(store: Store) -> None:
    store.open_fan_in("m", "r1", "each", 2, CANVAS)
    assert finish(store, 0, claim(store, 0), result=0).fan_in is None
    # a broken wrapper or deploy skew: failed whatever its lease, or with no row at all
    ended = store.fail_task_run(
        key(1), dag_id="m", run_id="r1", task_id="each", map_index=1, error="skew"
    )
    assert ended and ended.fan_in == CANVAS
    again = store.fail_task_run(
        key(1), dag_id="m", run_id="r1", task_id="each", map_index=1, error="skew"
    )
    assert not again and again.fan_in is None


def test_an_index_past_the_total_or_an_instance_without_a_fan_in_counts_nothing(
    store: Store,
) -> None:
    store.open_fan_in("m", "r1", "each", 1, CANVAS)
    past = finish(store, 5, claim(store, 5), "failed", error="no such item")
    assert past.written and past.fan_in is None
    assert store.fan_in_state("m", "r1", "each") == (0, 1)
    # an expansion of an earlier version (no fan-in row): finishing works, nothing counted
    other = store.finish_map_instance(
        "m/r2/each[0]", claim(store, 0, run_id="r2"), state="success", result=1
    )
    assert other.written and other.fan_in is None
    assert store.fan_in_state("m", "r2", "each") is None


def test_reopening_recounts_the_instances_already_final(store: Store) -> None:
    store.open_fan_in("m", "r1", "each", 3, CANVAS)
    tokens = {i: claim(store, i) for i in range(3)}
    finish(store, 0, tokens[0], result=0)
    finish(store, 1, tokens[1], result=1)
    # a count that drifted (a writer that does not count, operator SQL): the reopen fixes it
    store.force_task_state("m", "r1", "each", state="success", note="marked", dedupe_key=key(-1))
    resent = {"id": "resumed-expander", "chain": []}
    assert store.open_fan_in("m", "r1", "each", 3, resent)  # all final: continue directly
    assert store.fan_in_state("m", "r1", "each") == (3, 3)
    assert store.recount_fan_in("m", "r1", "each") == resent
    assert store.recount_fan_in("m", "r2", "each") is None


def test_a_reopened_fan_in_continues_with_the_newest_canvas(store: Store) -> None:
    store.open_fan_in("m", "r1", "each", 2, CANVAS)
    tokens = {i: claim(store, i) for i in range(2)}
    finish(store, 0, tokens[0], result=0)
    resent = {"id": "resumed-expander", "chain": [{"task": "next-of-the-resume"}]}
    assert not store.open_fan_in("m", "r1", "each", 2, resent)
    assert store.fan_in_state("m", "r1", "each") == (1, 2)
    assert finish(store, 1, tokens[1], result=1).fan_in == resent


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_concurrent_finishes_count_exactly_and_one_of_them_continues(
    make_store: MakeStore,
) -> None:
    width, threads = 240, 6
    setup = make_store()
    setup.open_fan_in("m", "r1", "each", width, CANVAS)
    tokens = {i: claim(setup, i) for i in range(width)}
    got: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def worker(part: int) -> None:
        store = make_store()  # a connection pool per thread, as processes would have
        try:
            start.wait()
            for i in range(part, width, threads):
                ended = finish(store, i, tokens[i], result=i)
                assert ended.written
                if ended.fan_in is not None:
                    got.append(ended.fan_in)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(p,)) for p in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)
    assert not errors, errors
    assert got == [CANVAS]
    assert setup.fan_in_state("m", "r1", "each") == (width, width)


def test_concurrent_finishes_and_a_reopen_lose_no_count(make_store: MakeStore) -> None:
    # the reopen's recount and the finishes' increments take the row's lock in turn
    width = 60
    setup = make_store()
    setup.open_fan_in("m", "r1", "each", width, CANVAS)
    tokens = {i: claim(setup, i) for i in range(width)}
    got: list[Any] = []
    errors: list[BaseException] = []

    def finishes() -> None:
        store = make_store()
        try:
            for i in range(width):
                ended = finish(store, i, tokens[i], result=i)
                if ended.fan_in is not None:
                    got.append(ended.fan_in)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def reopens() -> None:
        store = make_store()
        try:
            for _ in range(20):
                if store.open_fan_in("m", "r1", "each", width, CANVAS):
                    got.append("reopen saw every instance final")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    pool = [threading.Thread(target=finishes), threading.Thread(target=reopens)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)
    assert not errors, errors
    assert setup.fan_in_state("m", "r1", "each") == (width, width)
    assert got and got[0] in (CANVAS, "reopen saw every instance final")
    assert got.count(CANVAS) <= 1  # the count never passes the total twice
