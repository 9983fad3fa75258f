"""PostgreSQL: a trigger that finds a free slot and nothing queued inserts its run as running
without the DAG's dispatch lock (migration 0015), and the limit still holds against a racing
trigger and a racing dispatch, each caught here at the step where it would overshoot."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from beatflow.store import Store
from tests.procs import wait_for

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DISPATCH_LOCK = "SELECT pg_advisory_xact_lock(hashtext('beatflow.dispatch'), hashtext('d'))"
TRIGGER = (
    "SELECT * FROM beatflow_create_and_start(%s, %s, %s, 'manual', '{}'::json, now(), NULL, %s)"
)


@pytest.fixture
def pg(postgres_url: str) -> Iterator[tuple[Store, str]]:
    store = Store(postgres_url)
    store.upgrade()
    dsn = sa.make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    try:
        yield store, dsn
    finally:
        store.close()


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(fn()), daemon=True)
    thread.start()
    return thread, got


def waiting_on_a_lock(dsn: str) -> Callable[[], bool]:
    def check() -> bool:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state = 'active' AND wait_event_type = 'Lock'"
            ).fetchone()
        return row is not None and row[0] > 0

    return check


def running(store: Store) -> list[str]:
    return sorted(r.run_id for r in store.list_dag_runs("d", state="running"))


def test_a_trigger_with_a_free_slot_and_nothing_queued_does_not_wait_for_the_dispatch_lock(
    pg: tuple[Store, str],
) -> None:
    store, dsn = pg
    with psycopg.connect(dsn) as holder:
        holder.execute(DISPATCH_LOCK)  # held to the end of this transaction
        thread, got = in_thread(lambda: store.create_and_start_dag_run("d", "fast", 5))
        thread.join(20)
        assert not thread.is_alive(), "the trigger waited for the dispatch lock"
        assert got[0].created and got[0].run.state == "running"
        assert got[0].run.started_at is not None
        assert [r.run_id for r in got[0].started] == ["fast"]
        # the lock is real: with a run queued, a trigger takes the dispatch path and waits
        store.create_dag_run("d", "older", logical_date=T0)
        thread, got = in_thread(lambda: store.create_and_start_dag_run("d", "slow", 5))
        wait_for(waiting_on_a_lock(dsn), timeout=20, message="the trigger to wait on the lock")
        assert thread.is_alive()
        holder.rollback()
    thread.join(20)
    assert not thread.is_alive()
    assert [r.run_id for r in got[0].started] == ["older", "slow"]  # oldest first
    assert running(store) == ["fast", "older", "slow"]


def test_a_dispatch_counts_a_fast_trigger_not_yet_committed_and_keeps_the_limit(
    pg: tuple[Store, str],
) -> None:
    store, dsn = pg
    assert store.create_and_start_dag_run("d", "r1", 2).run.state == "running"
    with psycopg.connect(dsn) as fast:
        (row,) = fast.execute(TRIGGER, ("d", "a", T0, 2)).fetchall()
        assert row[1] is True  # started, in a transaction still open: the count is 2
        store.create_dag_run("d", "queued", logical_date=T0)
        thread, got = in_thread(lambda: store.start_queued_dag_runs("d", 2))
        # a count read without the row lock would see 1 running and start "queued" now
        wait_for(waiting_on_a_lock(dsn), timeout=20, message="the dispatch to wait on the count")
        fast.commit()
    thread.join(20)
    assert not thread.is_alive() and got == [[]]
    assert running(store) == ["a", "r1"]
    assert store.get_dag_run("d", "queued").state == "queued"  # type: ignore[union-attr]


def test_two_triggers_racing_for_the_last_slot_start_one_and_the_next_end_starts_the_other(
    pg: tuple[Store, str],
) -> None:
    store, dsn = pg
    store.create_and_start_dag_run("d", "r1", 2)
    with psycopg.connect(dsn) as fast:
        fast.execute(TRIGGER, ("d", "a", T0, 2)).fetchall()
        # "b" looks before "a" commits: one running, nothing queued, so it inserts as running
        thread, got = in_thread(
            lambda: store.create_and_start_dag_run("d", "b", 2, logical_date=T0 + timedelta(1))
        )
        wait_for(waiting_on_a_lock(dsn), timeout=20, message="b's count to wait for a's")
        fast.commit()
    thread.join(20)
    assert not thread.is_alive()
    assert got[0].created and got[0].run.state == "queued" and got[0].started == ()
    assert got[0].run.started_at is None
    assert running(store) == ["a", "r1"]
    assert store.transition_dag_run("d", "r1", to="success", from_states={"running"})
    assert [r.run_id for r in store.start_queued_dag_runs("d", 2)] == ["b"]
    assert running(store) == ["a", "b"]


def test_the_previous_releases_call_still_resolves_and_creates_an_unfollowed_run(
    pg: tuple[Store, str],
) -> None:
    """Migration 0018 replaced the function with one more argument, ``p_followed``, false by
    default: a worker or client of the previous release, calling with eight arguments during a
    rolling upgrade, reaches it (there is one function of the name) and marks nothing."""
    store, dsn = pg
    with psycopg.connect(dsn, autocommit=True) as conn:
        versions = conn.execute(
            "SELECT pg_get_function_identity_arguments(oid) FROM pg_proc "
            "WHERE proname = 'beatflow_create_and_start'"
        ).fetchall()
        assert len(versions) == 1 and versions[0][0].endswith("p_followed boolean"), versions
        conn.execute(TRIGGER, ("d", "old-call", T0, 5)).fetchall()
        conn.execute(TRIGGER.replace("%s)", "%s, true)"), ("d", "new-call", T0, 5)).fetchall()
    assert store.get_dag_run("d", "old-call").followed is False  # type: ignore[union-attr]
    assert store.get_dag_run("d", "new-call").followed is True  # type: ignore[union-attr]
