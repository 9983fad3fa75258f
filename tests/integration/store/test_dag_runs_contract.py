"""Store contract, DAG runs: one run per (dag_id, run_id), state transitions, the queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from beatflow.errors import StoreError
from beatflow.store import DagRunRecord, Store


def test_creating_a_dag_run_twice_makes_one_run_and_returns_the_first(store: Store) -> None:
    tick = datetime(2026, 1, 1, 6, tzinfo=UTC)
    first, created = store.create_dag_run(
        "etl",
        "scheduled__2026-01-01T06",
        logical_date=tick,
        trigger="scheduled",
        conf={"day": "2026-01-01"},
        leader_epoch=7,
    )
    again, created_again = store.create_dag_run(
        "etl",
        "scheduled__2026-01-01T06",
        logical_date=tick,
        trigger="scheduled",
        conf={"other": True},
        leader_epoch=8,
    )
    assert (created, created_again) == (True, False)
    assert again == first
    assert first.state == "queued"
    assert first.conf == {"day": "2026-01-01"}
    assert first.leader_epoch == 7
    assert first.logical_date == tick
    assert first.queued_at.tzinfo is not None
    assert len(store.list_dag_runs("etl")) == 1


def test_logical_dates_come_back_in_utc_whatever_zone_went_in(store: Store) -> None:
    paris = timezone(timedelta(hours=1))
    store.create_dag_run("etl", "r", logical_date=datetime(2026, 3, 1, 7, tzinfo=paris))
    run = store.get_dag_run("etl", "r")
    assert run is not None and run.logical_date is not None
    assert run.logical_date.utcoffset() == timedelta(0)
    assert run.logical_date == datetime(2026, 3, 1, 6, tzinfo=UTC)


def test_a_naive_logical_date_or_an_unknown_trigger_is_refused_clearly(store: Store) -> None:
    with pytest.raises(StoreError, match="no time zone"):
        store.create_dag_run("etl", "r", logical_date=datetime(2026, 1, 1))
    with pytest.raises(StoreError, match="unknown trigger 'cron'"):
        store.create_dag_run("etl", "r", trigger="cron")
    with pytest.raises(StoreError, match="not JSON-serialisable"):
        store.create_dag_run("etl", "r", conf={"when": datetime.now(UTC)})
    assert store.get_dag_run("etl", "r") is None


def test_a_dag_run_goes_queued_running_finished_and_finishing_twice_changes_nothing(
    store: Store,
) -> None:
    store.create_dag_run("etl", "r")
    store.mark_dag_run_running("etl", "r")
    running = store.get_dag_run("etl", "r")
    assert running is not None and running.state == "running" and running.started_at
    store.mark_dag_run_running("etl", "r")
    assert store.get_dag_run("etl", "r") == running  # started_at set once

    done = store.finish_dag_run("etl", "r", "success")
    assert done.state == "success" and done.ended_at is not None
    assert done.duration_seconds is not None and done.duration_seconds >= 0
    assert store.finish_dag_run("etl", "r", "failed") == done


def test_finishing_an_unknown_run_or_with_a_bad_state_raises_store_error(store: Store) -> None:
    with pytest.raises(StoreError, match="no DAG run etl/missing"):
        store.finish_dag_run("etl", "missing", "success")
    store.create_dag_run("etl", "r")
    with pytest.raises(StoreError, match="cannot finish DAG run etl/r as 'running'"):
        store.finish_dag_run("etl", "r", "running")


def test_get_dag_run_returns_none_for_an_unknown_run(store: Store) -> None:
    assert store.get_dag_run("etl", "nope") is None


def test_list_dag_runs_is_newest_first_filtered_and_limited(store: Store) -> None:
    for i in range(5):
        store.create_dag_run("etl", f"r{i}")
    store.create_dag_run("other", "x")
    store.finish_dag_run("etl", "r1", "failed")

    assert [r.run_id for r in store.list_dag_runs("etl")] == ["r4", "r3", "r2", "r1", "r0"]
    assert [r.run_id for r in store.list_dag_runs("etl", limit=2)] == ["r4", "r3"]
    assert [r.run_id for r in store.list_dag_runs("etl", state="failed")] == ["r1"]
    assert {r.dag_id for r in store.list_dag_runs()} == {"etl", "other"}
    assert all(isinstance(r, DagRunRecord) for r in store.list_dag_runs())


def test_active_runs_count_queued_and_running_only(store: Store) -> None:
    for run_id in ("a", "b", "c"):
        store.create_dag_run("etl", run_id)
    store.mark_dag_run_running("etl", "b")
    store.finish_dag_run("etl", "c", "success")
    store.create_dag_run("other", "a")
    assert store.count_active_dag_runs("etl") == 2
    assert store.count_active_dag_runs("nothing") == 0


def test_latest_logical_date_is_the_greatest_one_of_that_dag(store: Store) -> None:
    assert store.latest_logical_date("etl") is None
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for hours in (3, 1, 2):
        store.create_dag_run("etl", f"t{hours}", logical_date=base + timedelta(hours=hours))
    store.create_dag_run("etl", "manual")  # no logical date
    store.create_dag_run("other", "later", logical_date=base + timedelta(days=9))
    assert store.latest_logical_date("etl") == base + timedelta(hours=3)


def test_dag_runs_are_counted_by_dag_and_state(store: Store) -> None:
    for run_id in ("a", "b", "c"):
        store.create_dag_run("etl", run_id)
    store.finish_dag_run("etl", "a", "success")
    store.finish_dag_run("etl", "b", "success")
    store.create_dag_run("other", "a")
    assert store.count_dag_runs_by_state() == {
        ("etl", "success"): 2,
        ("etl", "queued"): 1,
        ("other", "queued"): 1,
    }


def _running_run(store: Store, dag_id: str, run_id: str) -> None:
    store.create_dag_run(dag_id, run_id, logical_date=None, trigger="manual", conf={})
    assert [r.run_id for r in store.start_queued_dag_runs(dag_id, 100)] == [run_id]


def test_a_followed_run_ends_as_followed_by_every_closing_path(store: Store) -> None:
    """follow_dag_run marks a run (migration 0013), and the statements that end a run return
    the mark, so the worker announces the end exactly when someone listens."""
    assert store.follow_dag_run("etl", "no-such-run") is None
    for run_id in ("watched", "alone", "watched-closed", "alone-closed"):
        _running_run(store, "etl", run_id)
    marked = store.follow_dag_run("etl", "watched")
    assert marked is not None and marked.followed and marked.state == "running"
    marked = store.follow_dag_run("etl", "watched-closed")
    assert marked is not None and marked.followed
    assert store.get_dag_run("etl", "alone").followed is False  # type: ignore[union-attr]
    # the closing task's own finish (one statement on PostgreSQL)
    for run_id in ("watched", "alone"):
        key = f"etl/{run_id}/last"
        claim = store.claim_task_run(
            key, dag_id="etl", run_id=run_id, task_id="last", map_index=-1, worker="w"
        )
        assert claim.token is not None
        done = store.finish_and_close(
            key, claim.token, result=None, dag_id="etl", run_id=run_id,
            run_state="success", max_active_runs=100,
        )  # fmt: skip
        assert done.closed is not None
        assert done.closed.followed is (run_id == "watched")
    # the close by a separate step (beatflow.finish_run, the reconciler)
    for run_id in ("watched-closed", "alone-closed"):
        closed = store.transition_dag_run_returning(
            "etl", run_id, to="failed", from_states={"running"}
        )
        assert closed is not None and closed.followed is (run_id == "watched-closed")
    # a follower that comes after the end sees it at once
    late = store.follow_dag_run("etl", "alone")
    assert late is not None and late.state == "success"
