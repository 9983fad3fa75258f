"""Store contract, the node wrapper's hot path: one statement reads the DAG run and exactly the
rows a task needs (its upstream's and its own), so a mapped instance never reads its siblings."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from beatflow.errors import StoreError
from beatflow.store import Store
from beatflow.store.hot import MAX_BOUND_UPSTREAM
from tests.integration.store.conftest import MakeStore


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


def _source(store: Store, run_id: str, result: object) -> None:
    key = f"etl/{run_id}/src"
    claim = store.claim_task_run(key, dag_id="etl", run_id=run_id, task_id="src")
    assert claim.token is not None
    store.finish_task_run(key, claim.token, state="success", result=result)


def test_a_mapped_instance_reads_only_its_own_item_of_the_list_it_maps_over(store: Store):
    active_run(store, "r7")
    items = [{"n": 0}, "one", [2, 2], None, 4.5, True]
    _source(store, "r7", items)
    for i, item in enumerate(items):
        run, rows, claim = store.read_and_claim(
            "etl", "r7", "each", i, f"etl/r7/each[{i}]", ["etl/r7/src"],
            element=("etl/r7/src", i),
        )  # fmt: skip
        assert run is not None and claim is not None and claim.outcome == "run"
        assert [(t.task_id, t.result) for t in rows] == [("src", item)]
        _, read = store.read_for_task(
            "etl", "r7", "each", i, {"src"}, keys=["etl/r7/src"], element=("etl/r7/src", i)
        )
        assert [t.result for t in read] == [item]
        # the unkeyed read (custom keys) gives the same answer, taken from the whole row
        _, unkeyed = store.read_for_task("etl", "r7", "each", i, {"src"}, element=("etl/r7/src", i))
        assert [t.result for t in unkeyed if t.task_id == "src"] == [item]
    _, past, _ = store.read_and_claim(
        "etl", "r7", "each", 6, "etl/r7/each[6]", ["etl/r7/src"], element=("etl/r7/src", 6)
    )
    assert [t.result for t in past] == [None]
    # other rows read with it keep their whole result; without element, the whole list
    _, whole = store.read_for_task("etl", "r7", "each", 0, {"src"}, keys=["etl/r7/src"])
    assert [t.result for t in whole] == [items]


def test_an_instance_reads_the_item_recorded_at_expansion_not_its_sources_list(store: Store):
    # the recorded items differ from the source's result here, to tell which one is read
    active_run(store, "r5")
    _source(store, "r5", [1, 2, 3])
    store.record_map_items("etl", "r5", "each", ["a", {"b": [2]}, None])

    def read(i: int) -> list[object]:
        _, rows, _ = store.read_and_claim(
            "etl", "r5", "each", i, f"etl/r5/each[{i}]", ["etl/r5/src"],
            element=("etl/r5/src", i),
        )  # fmt: skip
        _, by_key = store.read_for_task(
            "etl", "r5", "each", i, {"src"}, keys=["etl/r5/src"], element=("etl/r5/src", i)
        )
        assert [t.result for t in by_key] == [t.result for t in rows]
        return [t.result for t in rows if t.task_id == "src"]

    assert [read(i) for i in range(3)] == [["a"], [{"b": [2]}], [None]]
    # expanding again (redelivered, or cleared and run again) overwrites the items
    store.record_map_items("etl", "r5", "each", ["x", "y", "z", "w"])
    assert read(3) == ["w"]
    # another task's items, or none recorded: the source's own item
    store.record_map_items("etl", "r5", "other", ["not this"])
    _, rows, _ = store.read_and_claim(
        "etl", "r5", "none", 1, "etl/r5/none[1]", ["etl/r5/src"], element=("etl/r5/src", 1)
    )
    assert [t.result for t in rows] == [2]


def test_an_element_index_must_be_a_whole_number(store: Store):
    active_run(store, "r6")
    _source(store, "r6", [1, 2])
    for bad in (-1, "0", 1.0):
        element = ("etl/r6/src", bad)
        for keys in (["etl/r6/src"], None):  # found by key, or read whole
            with pytest.raises(StoreError, match="element index"):
                store.read_for_task("etl", "r6", "e", 0, {"src"}, keys=keys, element=element)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="element index"):
            store.read_and_claim("etl", "r6", "e", 0, "etl/r6/e[0]", [], element=element)  # type: ignore[arg-type]


# ------------------------------------------------------------------ read and claim in one


def active_run(store: Store, run_id: str = "r9") -> None:
    store.create_dag_run("etl", run_id, logical_date=datetime.now(UTC))
    assert [r.run_id for r in store.start_queued_dag_runs("etl", 100)] == [run_id]


def test_a_root_task_is_read_and_claimed_in_one_call_as_a_plain_claim_would(store: Store):
    active_run(store)
    run, rows, claim = store.read_and_claim(
        "etl", "r9", "a", -1, "etl/r9/a", [], worker="w1", celery_task_id="c1"
    )
    assert run is not None and run.state == "running" and rows == []
    assert claim is not None and claim.outcome == "run" and claim.token
    record = claim.record
    assert (record.state, record.try_number, record.worker, record.celery_task_id) == (
        "running",
        1,
        "w1",
        "c1",
    )
    assert record.lease_expires_at is not None and record.started_at is not None
    assert record.lease_expires_at > record.started_at
    assert store.get_task_run("etl/r9/a") == record
    # the claim is real: a second reader finds the row and claims nothing; a plain claim waits
    _, rows, again = store.read_and_claim("etl", "r9", "a", -1, "etl/r9/a", [])
    assert again is None and [t.state for t in rows] == ["running"]
    assert store.claim_task_run("etl/r9/a", dag_id="etl", run_id="r9", task_id="a").outcome == (
        "held"
    )
    assert store.finish_task_run("etl/r9/a", claim.token, state="success", result=1)


def test_a_downstream_task_is_claimed_only_once_every_upstream_row_succeeded(store: Store):
    active_run(store)
    up = ["etl/r9/a", "etl/r9/b"]
    claims = {}
    for key, task_id in zip(up, "ab", strict=True):
        claims[task_id] = store.claim_task_run(key, dag_id="etl", run_id="r9", task_id=task_id)

    def read() -> tuple[list[str], object]:
        _, rows, claim = store.read_and_claim("etl", "r9", "c", -1, "etl/r9/c", up)
        return sorted(f"{t.task_id}:{t.state}" for t in rows), claim

    assert read() == (["a:running", "b:running"], None)  # upstream not final: no claim
    store.finish_task_run("etl/r9/a", claims["a"].token, state="success", result="A")
    assert read() == (["a:success", "b:running"], None)
    store.finish_task_run("etl/r9/b", claims["b"].token, state="failed", error="x")
    assert read() == (["a:success", "b:failed"], None)  # a failed upstream: decide's call
    assert store.get_task_run("etl/r9/c") is None  # nothing was written by those reads
    store.reset_task_run("etl/r9/b")
    again = store.claim_task_run("etl/r9/b", dag_id="etl", run_id="r9", task_id="b")
    store.finish_task_run("etl/r9/b", again.token, state="success", result="B")
    _, rows, claim = store.read_and_claim("etl", "r9", "c", -1, "etl/r9/c", up)
    assert claim is not None and claim.outcome == "run" and claim.record.task_id == "c"
    assert sorted((t.task_id, t.result) for t in rows) == [("a", "A"), ("b", "B")]


def test_no_claim_for_an_ended_run_a_missing_run_or_an_existing_row(store: Store):
    active_run(store)
    first = store.claim_task_run("etl/r9/a", dag_id="etl", run_id="r9", task_id="a")
    store.finish_task_run("etl/r9/a", first.token, state="up_for_retry", error="try again")
    _, rows, claim = store.read_and_claim("etl", "r9", "a", -1, "etl/r9/a", [])
    assert claim is None and [t.state for t in rows] == ["up_for_retry"]  # the plain claim's
    assert store.read_and_claim("etl", "nope", "a", -1, "etl/nope/a", []) == (None, [], None)
    store.transition_dag_run("etl", "r9", to="cancelled", from_states={"running"})
    run, _, claim = store.read_and_claim("etl", "r9", "z", -1, "etl/r9/z", [])
    assert run is not None and run.state == "cancelled" and claim is None
    assert store.get_task_run("etl/r9/z") is None


def _claimed_run(store: Store, run_id: str) -> str:
    store.create_dag_run("etl", run_id)
    store.start_queued_dag_runs("etl", 16)
    claim = store.claim_task_run(f"etl/{run_id}/last", dag_id="etl", run_id=run_id, task_id="last")
    assert claim.token is not None
    return claim.token


def test_finish_and_close_writes_the_success_and_ends_the_run_together(store: Store):
    token = _claimed_run(store, "fc1")
    done = store.finish_and_close(
        "etl/fc1/last", token, result={"n": 1}, dag_id="etl", run_id="fc1", run_state="success",
        max_active_runs=16,
    )  # fmt: skip
    closed = done.closed
    assert done.written and closed is not None and done.started == ()
    assert closed.state == "success" and closed.ended_at is not None
    row = store.get_task_run("etl/fc1/last")
    assert row is not None and row.state == "success" and row.result == {"n": 1}
    stored = store.get_dag_run("etl", "fc1")
    assert stored is not None and stored.state == "success" and stored.started_at is not None


def test_finish_and_close_without_the_lease_writes_nothing_and_leaves_the_run_running(
    store: Store,
):
    _claimed_run(store, "fc2")
    done = store.finish_and_close(
        "etl/fc2/last", "not-the-token", result=1, dag_id="etl", run_id="fc2", run_state="success",
        max_active_runs=16,
    )  # fmt: skip
    assert (done.written, done.closed, done.started) == (False, None, ())
    row = store.get_task_run("etl/fc2/last")
    assert row is not None and row.state == "running"
    stored = store.get_dag_run("etl", "fc2")
    assert stored is not None and stored.state == "running"


def test_finish_and_close_of_a_run_ended_elsewhere_writes_the_task_and_closes_nothing(
    store: Store,
):
    token = _claimed_run(store, "fc3")
    store.transition_dag_run("etl", "fc3", to="cancelled", from_states={"running"})
    store.create_dag_run("etl", "fc3-waiting")  # queued: not started by a close that did not close
    done = store.finish_and_close(
        "etl/fc3/last", token, result=1, dag_id="etl", run_id="fc3", run_state="success",
        max_active_runs=16,
    )  # fmt: skip
    assert done.written and done.closed is None and done.started == ()
    stored = store.get_dag_run("etl", "fc3")
    assert stored is not None and stored.state == "cancelled"


def test_finish_and_close_starts_the_waiting_runs_the_freed_slot_allows_oldest_first(
    store: Store,
):
    token = _claimed_run(store, "fc4")  # the DAG's one slot (max_active_runs=1) is fc4's
    store.create_dag_run("etl", "later", logical_date=datetime(2026, 1, 2, tzinfo=UTC))
    store.create_dag_run("etl", "earlier", logical_date=datetime(2026, 1, 1, tzinfo=UTC))
    assert store.start_queued_dag_runs("etl", 1) == []  # full
    done = store.finish_and_close(
        "etl/fc4/last", token, result=None, dag_id="etl", run_id="fc4", run_state="failed",
        max_active_runs=1,
    )  # fmt: skip
    assert done.closed is not None and done.closed.state == "failed"
    assert [r.run_id for r in done.started] == ["earlier"]
    assert [r.state for r in done.started] == ["running"]
    row = store.get_task_run("etl/fc4/last")
    assert row is not None and row.state == "success" and row.result is None
    later = store.get_dag_run("etl", "later")
    assert later is not None and later.state == "queued"


STALL_SECONDS = 10.0


@dataclass
class _Race:
    """Triggers and closers of one DAG with one slot, on stores of their own (threads)."""

    runs: int
    ready: queue.Queue[str] = field(default_factory=queue.Queue)  # started, to be closed
    closed: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    triggered: threading.Event = field(default_factory=threading.Event)  # every trigger done
    progress: float = field(default_factory=time.monotonic)  # when a run was last closed

    def trigger(self, s: Store, ids: list[str]) -> None:
        try:
            for run_id in ids:
                for r in s.create_and_start_dag_run("race", run_id, 1).started:
                    self.ready.put(r.run_id)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's assertion
            self.errors.append(exc)

    def close(self, s: Store) -> None:
        try:
            while len(self.closed) < self.runs and not self._stuck(s):
                try:
                    run_id = self.ready.get(timeout=0.2)
                except queue.Empty:
                    continue
                key = f"race/{run_id}/t"
                claim = s.claim_task_run(key, dag_id="race", run_id=run_id, task_id="t")
                assert claim.token is not None
                done = s.finish_and_close(
                    key, claim.token, result=None, dag_id="race", run_id=run_id,
                    run_state="success", max_active_runs=1,
                )  # fmt: skip
                assert done.written and done.closed is not None
                self.closed.append(run_id)
                self.progress = time.monotonic()
                for r in done.started:
                    self.ready.put(r.run_id)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's assertion
            self.errors.append(exc)

    def _stuck(self, s: Store) -> bool:
        """A queued run with its slot free and nothing left to start it (a lost wake-up), or
        no run closed for 10 s once every trigger is done (a run started and never handed
        on)."""
        if not self.triggered.is_set() or not self.ready.empty():
            return False
        if time.monotonic() - self.progress > STALL_SECONDS:
            return True
        return not s.list_dag_runs("race", state="running") and bool(
            s.list_dag_runs("race", state="queued")
        )


def test_triggers_racing_closes_never_leave_a_run_queued_behind_a_free_slot(
    make_store: MakeStore,
):
    """Two triggers and two closers on a DAG with one slot: every close starts the next waiting
    run, a trigger starts its run when the slot is free; once every run has been triggered and
    every started one closed, none is left queued (a lost wake-up would leave one)."""
    race = _Race(runs=40)
    ids = [f"r{i:02d}" for i in range(race.runs)]
    closers = [threading.Thread(target=race.close, args=(make_store(),)) for _ in range(2)]
    triggers = [
        threading.Thread(target=race.trigger, args=(make_store(), ids[n::2])) for n in range(2)
    ]
    for t in closers + triggers:
        t.start()
    for t in triggers:
        t.join(120)
    race.triggered.set()
    for t in closers:
        t.join(120)
    assert not any(t.is_alive() for t in closers + triggers)
    assert race.errors == []
    assert make_store().list_dag_runs("race", state="queued") == []
    assert sorted(race.closed) == ids  # each run started and closed once


def test_postgresql_plans_the_claim_statement_once_per_connection_not_on_every_call(store: Store):
    """The read-and-claim is a prepared statement; PostgreSQL keeps planning it afresh for every
    call while a plan made for the call's own values looks cheaper than the generic one. With the
    keys as an array literal it always did (it could count the keys), and planning cost 0.85 ms
    per call, four times the execution (pg_stat_statements in a 200-chain bench)."""
    if store.dialect != "postgresql":
        pytest.skip("PostgreSQL's plan cache")
    active_run(store, "rp")
    _source(store, "rp", 1)
    calls = 20  # psycopg prepares from the 6th call; PostgreSQL tries 5 custom plans first
    for i in range(calls):
        key = f"etl/rp/t{i}"
        _, _, claim = store.read_and_claim("etl", "rp", f"t{i}", -1, key, ["etl/rp/src"])
        assert claim is not None and claim.token is not None
    with store._engine.connect() as conn:  # the pool's one connection, which made the calls
        plans = conn.exec_driver_sql(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH p AS%%claim AS (INSERT INTO task_runs%%'"
        ).all()
    assert len(plans) == 1, plans
    generic, custom = plans[0]
    assert custom <= 5 and generic >= calls - 5 - 6, (generic, custom)


def test_a_value_the_database_refuses_is_a_store_error_and_the_store_goes_on(store: Store):
    """The hot path's statements run on the driver, past SQLAlchemy: what the driver raises still
    comes back as beatflow's StoreError (with SQLAlchemy's error as its cause), never raw."""
    if store.dialect != "postgresql":
        pytest.skip("the driver path is PostgreSQL's")
    active_run(store, "rz")
    with pytest.raises(StoreError) as caught:
        store.read_and_claim("etl", "rz", "a\x00b", -1, "etl/rz/a\x00b", [])
    assert "refused reading and claiming task" in str(caught.value)
    _, _, claim = store.read_and_claim("etl", "rz", "a", -1, "etl/rz/a", [])
    assert claim is not None and claim.token is not None
    with pytest.raises(StoreError) as refused:
        store.finish_task_run("etl/rz/a", claim.token, state="success", map_count=2**40)
    assert isinstance(refused.value.__cause__, sa.exc.DBAPIError)
    assert store.finish_task_run("etl/rz/a", claim.token, state="success", result="ab")


def test_a_connection_the_hot_path_used_goes_back_to_the_pool_out_of_autocommit(store: Store):
    """The hot path runs in autocommit on a pooled psycopg connection; the next user of that
    connection must get a transaction from begin() (LOCK TABLE refuses to run outside one)."""
    if store.dialect != "postgresql":
        pytest.skip("the driver path is PostgreSQL's")
    store.create_and_start_dag_run("etl", "ac", 16)
    assert store.read_and_claim("etl", "ac", "t", -1, "etl/ac/t", [])[2] is not None
    with store._engine.connect() as conn:  # the pool hands back the connection just used
        with conn.begin():
            conn.execute(sa.text("LOCK TABLE dag_runs IN SHARE MODE"))
        assert conn.connection.driver_connection.autocommit is False
