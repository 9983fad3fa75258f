"""Store contract, pause switches and retention (prune in batches)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from beatflow.errors import StoreError
from beatflow.store import Store
from beatflow.store.models import map_items, pool_slots
from tests.integration.store.conftest import MakeStore


def test_pausing_survives_a_new_store_and_unpausing_clears_it(make_store: MakeStore) -> None:
    store = make_store()
    assert not store.is_paused("etl") and store.paused_dag_ids() == set()
    store.set_paused("etl", True)
    store.set_paused("report", True)
    store.set_paused("report", True)  # idempotent
    restarted = make_store()
    assert restarted.is_paused("etl")
    assert restarted.paused_dag_ids() == {"etl", "report"}
    restarted.set_paused("etl", False)
    assert not store.is_paused("etl")
    assert store.paused_dag_ids() == {"report"}


def _finished_run(store: Store, dag_id: str, run_id: str, state: str = "success") -> None:
    store.create_dag_run(dag_id, run_id)
    claim = store.claim_task_run(f"{dag_id}/{run_id}/t", dag_id=dag_id, run_id=run_id, task_id="t")
    store.finish_task_run(f"{dag_id}/{run_id}/t", claim.token or "", state="failed", error="x")
    store.add_dead_letter(
        dedupe_key=f"{dag_id}/{run_id}/t",
        dag_id=dag_id,
        run_id=run_id,
        task_id="t",
        map_index=-1,
        args={},
        conf={},
        error="x",
        traceback=None,
        tries=1,
    )
    store.finish_dag_run(dag_id, run_id, state)


def test_prune_deletes_only_finished_runs_older_than_the_cutoff_in_batches(
    store: Store,
) -> None:
    for i in range(5):
        _finished_run(store, "etl", f"old{i}", state="success" if i % 2 else "failed")
    store.create_dag_run("etl", "queued")  # never finished: kept whatever its age
    store.create_dag_run("etl", "running")
    store.mark_dag_run_running("etl", "running")
    store.claim_task_run("etl/running/t", dag_id="etl", run_id="running", task_id="t")
    for run_id in ("old0", "running"):
        store.record_map_items("etl", run_id, "each", [1, 2])

    # nothing ended a day ago yet: nothing to prune
    assert store.prune(timedelta(days=1)) == 0
    batches: list[int] = []
    assert store.prune(timedelta(0), batch_size=2, on_batch=batches.append) == 5
    assert batches == [2, 2, 1]

    assert {r.run_id for r in store.list_dag_runs("etl")} == {"queued", "running"}
    assert [t.dedupe_key for t in store.get_task_runs("etl", "running")] == ["etl/running/t"]
    for i in range(5):
        assert store.get_task_runs("etl", f"old{i}") == []
    assert store.count_dead_letters() == 0
    with store._read("counting map items") as conn:  # pruned with their run, kept with the rest
        left = conn.execute(sa.select(map_items.c.run_id, map_items.c.map_index)).all()
    assert sorted(left) == [("running", 0), ("running", 1)]
    assert store.prune(timedelta(0)) == 0


def test_prune_keeps_recent_finished_runs(store: Store) -> None:
    _finished_run(store, "etl", "recent")
    assert store.prune(timedelta(hours=1)) == 0
    assert store.get_dag_run("etl", "recent") is not None
    assert len(store.get_task_runs("etl", "recent")) == 1


def test_prune_deletes_the_pool_holds_of_the_runs_it_deletes(store: Store) -> None:
    store.set_pool("warehouse", 1)
    for run_id in ("old", "live"):
        store.create_dag_run("etl", run_id)
    held = store.claim_pooled("etl/old/t", pool="warehouse", slots=1, dag_id="etl",
                              run_id="old", task_id="t")  # fmt: skip
    assert held.claim is not None and held.claim.token is not None
    store.finish_task_run("etl/old/t", held.claim.token, state="success")
    store.finish_dag_run("etl", "old", "success")
    live = store.claim_pooled("etl/live/t", pool="warehouse", slots=1, dag_id="etl",
                              run_id="live", task_id="t")  # fmt: skip
    assert live.claim is not None and live.claim.outcome == "run"
    waiting = store.claim_pooled("etl/live/u", pool="warehouse", slots=1, dag_id="etl",
                                 run_id="live", task_id="u")  # fmt: skip
    assert waiting.claim is None and waiting.wait == "full"

    assert store.prune(timedelta(0)) == 1
    with store._read("listing pool holds") as conn:
        left = conn.execute(sa.select(pool_slots.c.dedupe_key, pool_slots.c.state)).all()
    assert sorted(left) == [("etl/live/t", "used"), ("etl/live/u", "queued")]
    assert store.get_pool("warehouse") is not None  # the pool itself stays


def test_writers_are_not_locked_out_while_prune_runs(make_store: MakeStore) -> None:
    store = make_store()
    for i in range(60):
        store.create_dag_run("etl", f"old{i}")
        store.finish_dag_run("etl", f"old{i}", "success")
    writer = make_store()
    written: list[str] = []

    def write_between_batches(_: int) -> None:
        # a write from another store (its own connection) lands while prune is mid-way
        run_id = f"new{len(written)}"
        thread = threading.Thread(
            target=lambda: written.append(writer.create_dag_run("etl", run_id)[0].run_id)
        )
        thread.start()
        thread.join(timeout=10)

    assert store.prune(timedelta(0), batch_size=20, on_batch=write_between_batches) == 60
    assert written == ["new0", "new1", "new2"]
    assert {r.run_id for r in store.list_dag_runs("etl")} == set(written)


def test_prune_refuses_negative_ages_and_empty_batches(store: Store) -> None:
    with pytest.raises(StoreError, match="must not be negative"):
        store.prune(timedelta(days=-1))
    with pytest.raises(StoreError, match="batch_size=0"):
        store.prune(timedelta(days=1), batch_size=0)
