"""Store contract, the node wrapper's hot path: one statement reads the DAG run and exactly the
rows a task needs (its upstream's and its own), so a mapped instance never reads its siblings."""

from __future__ import annotations

from datetime import UTC, datetime

from beatflow.store import Store
from beatflow.store.hot import MAX_BOUND_UPSTREAM


def seed(store: Store, width: int = 10) -> None:
    store.create_dag_run("etl", "r1", logical_date=datetime.now(UTC), conf={"n": 1})
    done = [("a", -1), ("other", -1), *[("m", i) for i in range(width)]]
    for task_id, index in done:
        key = f"etl/r1/{task_id}" + ("" if index < 0 else f"[{index}]")
        claim = store.claim_task_run(
            key, dag_id="etl", run_id="r1", task_id=task_id, map_index=index
        )
        assert claim.token is not None
        store.finish_task_run(key, claim.token, state="success", result=[task_id, index])


def test_a_mapped_instance_reads_the_run_its_upstream_and_its_own_row_only(store: Store):
    seed(store)
    run, rows = store.read_for_task("etl", "r1", "m", 3, {"a"})
    assert run is not None and run.run_id == "r1" and run.conf == {"n": 1}
    assert sorted((t.task_id, t.map_index) for t in rows) == [("a", -1), ("m", 3)]


def test_a_downstream_of_a_map_reads_every_instance(store: Store):
    seed(store, width=4)
    _, rows = store.read_for_task("etl", "r1", "collect", -1, {"m"})
    assert sorted(t.map_index for t in rows) == [0, 1, 2, 3]


def test_a_run_without_rows_and_a_missing_run(store: Store):
    store.create_dag_run("etl", "r2", logical_date=datetime.now(UTC))
    run, rows = store.read_for_task("etl", "r2", "a", -1, set())
    assert run is not None and rows == []
    assert store.read_for_task("etl", "nope", "a", -1, {"x"}) == (None, [])


def test_a_huge_fan_in_reads_the_run_unfiltered_and_keeps_only_what_it_needs(store: Store):
    seed(store)
    upstream = {"a", *(f"x{i}" for i in range(MAX_BOUND_UPSTREAM))}
    _, rows = store.read_for_task("etl", "r1", "sink", -1, upstream)
    assert [t.task_id for t in rows] == ["a"]


def test_rows_found_by_their_dedupe_keys_are_the_same_rows(store: Store):
    seed(store)
    keys = ["etl/r1/m[3]", "etl/r1/a"]
    run, rows = store.read_for_task("etl", "r1", "m", 3, {"a"}, keys=keys)
    assert run is not None
    assert sorted((t.task_id, t.map_index) for t in rows) == [("a", -1), ("m", 3)]
    _, none_yet = store.read_for_task("etl", "r1", "z", -1, {"a"}, keys=["etl/r1/z"])
    assert none_yet == []
