"""Store contract (SQLite and PostgreSQL) for the fused dispatches: a trigger's create-and-start
in one transaction, and the queued runs of many DAGs started in one; the same guarantees as
start_queued_dag_runs (one run per run id, one winner, never over the limit, oldest first)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from beatflow.errors import StaleLeaderError, StoreError
from beatflow.store import Store
from beatflow.store.records import ScheduledRunDraft
from tests.integration.store.conftest import MakeStore
from tests.procs import wait_for

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def test_a_new_run_is_created_and_started_and_the_same_run_id_again_is_the_same_run(
    store: Store,
) -> None:
    first = store.create_and_start_dag_run(
        "d", "r", 2, logical_date=T0, trigger="scheduled", conf={"a": 1}, leader_epoch=3
    )
    assert first.created
    assert first.run.state == "running" and first.run.started_at is not None
    assert [r.run_id for r in first.started] == ["r"]
    assert first.run.conf == {"a": 1} and first.run.leader_epoch == 3
    assert first.run.logical_date == T0 and first.run.trigger == "scheduled"
    again = store.create_and_start_dag_run("d", "r", 2, logical_date=T0, conf={"b": 2})
    assert not again.created and again.started == ()
    assert again.run == first.run
    assert len(store.list_dag_runs("d")) == 1


def test_a_run_created_followed_carries_the_mark_and_an_existing_run_keeps_its_own(
    store: Store,
) -> None:
    """``followed`` (migration 0018) marks a new run in its insert, on the fast path (started),
    queued behind the limit, and queued then started by the dispatch alike; a run id that
    exists keeps the mark it has, whatever the trigger asks."""
    fast = store.create_and_start_dag_run("d", "fast", 1, logical_date=T0, followed=True)
    assert fast.created and fast.run.state == "running" and fast.run.followed
    over = store.create_and_start_dag_run(
        "d", "over", 1, logical_date=T0 + timedelta(days=1), followed=True
    )
    assert over.created and over.run.state == "queued" and over.run.followed
    plain = store.create_and_start_dag_run("e", "plain", 1, logical_date=T0)
    assert plain.created and not plain.run.followed
    store.create_dag_run("f", "waiting", logical_date=T0)  # queued first: no fast path for f
    slow = store.create_and_start_dag_run(
        "f", "slow", 2, logical_date=T0 + timedelta(days=1), followed=True
    )
    assert slow.created and slow.run.state == "running" and slow.run.followed
    assert {r.run_id: r.followed for r in slow.started} == {"waiting": False, "slow": True}
    again = store.create_and_start_dag_run("e", "plain", 1, logical_date=T0, followed=True)
    assert not again.created and not again.run.followed
    assert store.get_dag_run("e", "plain").followed is False  # type: ignore[union-attr]
    marked = store.create_and_start_dag_run("d", "fast", 1, logical_date=T0)
    assert not marked.created and marked.run.followed
    for dag_id, run_id in (("d", "fast"), ("d", "over"), ("f", "slow")):
        assert store.get_dag_run(dag_id, run_id).followed is True  # type: ignore[union-attr]


def test_a_run_over_the_limit_stays_queued_and_an_older_queued_run_goes_first(
    store: Store,
) -> None:
    store.create_dag_run("d", "old", logical_date=T0)
    new = store.create_and_start_dag_run("d", "new", 1, logical_date=T0 + timedelta(days=1))
    assert new.created and new.run.state == "queued"
    assert [r.run_id for r in new.started] == ["old"]  # the caller sends it
    over = store.create_and_start_dag_run("d", "newer", 1, logical_date=T0 + timedelta(days=2))
    assert over.created and over.run.state == "queued" and over.started == ()
    running = store.list_dag_runs("d", state="running")
    assert [r.run_id for r in running] == ["old"]


def test_an_existing_queued_run_is_dispatched_by_its_second_trigger(store: Store) -> None:
    first = store.create_and_start_dag_run("d", "r", 1, logical_date=T0)
    # its send failed: back to queued, as send_run does
    assert store.transition_dag_run("d", "r", to="queued", from_states={"running"})
    again = store.create_and_start_dag_run("d", "r", 1, logical_date=T0)
    assert not again.created
    assert again.run.state == "running" and [r.run_id for r in again.started] == ["r"]
    assert again.run.started_at == first.run.started_at  # started once, kept


def test_a_finished_run_triggered_again_is_returned_as_it_is(store: Store) -> None:
    store.create_and_start_dag_run("d", "r", 1, logical_date=T0)
    store.transition_dag_run("d", "r", to="success", from_states={"running"})
    store.create_dag_run("d", "waiting", logical_date=T0 + timedelta(days=1))
    again = store.create_and_start_dag_run("d", "r", 1, logical_date=T0)
    assert not again.created and again.run.state == "success" and again.started == ()
    waiting = store.get_dag_run("d", "waiting")
    assert waiting is not None and waiting.state == "queued"  # not this call's business


def test_a_bad_trigger_conf_or_date_is_refused_and_creates_nothing(store: Store) -> None:
    with pytest.raises(StoreError, match="unknown trigger 'cron'"):
        store.create_and_start_dag_run("d", "r", 1, trigger="cron")
    with pytest.raises(StoreError, match="no time zone"):
        store.create_and_start_dag_run("d", "r", 1, logical_date=datetime(2026, 1, 1))
    with pytest.raises(StoreError, match="not JSON-serialisable"):
        store.create_and_start_dag_run("d", "r", 1, conf={"when": T0})
    assert store.get_dag_run("d", "r") is None


def test_racing_triggers_make_one_run_per_run_id_and_never_exceed_the_limit(
    make_store: MakeStore,
) -> None:
    # Every store triggers the same twelve run ids, each starting at a different one (its own
    # rotation), released together per DAG: the first triggers are distinct new runs racing
    # for the three slots, the later ones race on the same run ids.
    stores = [make_store() for _ in range(4)]
    run_ids = [f"r{i:02d}" for i in range(12)]
    dags = [f"d{i}" for i in range(5)]  # five races
    started: dict[str, list[str]] = {dag: [] for dag in dags}
    created: dict[str, list[str]] = {dag: [] for dag in dags}
    errors: list[BaseException] = []
    gate = threading.Barrier(len(stores))

    def trigger(k: int, s: Store) -> None:
        order = run_ids[3 * k :] + run_ids[: 3 * k]
        try:
            for dag in dags:
                gate.wait(60)
                for run_id in order:
                    when = T0 + timedelta(hours=int(run_id[1:]))
                    got = s.create_and_start_dag_run(dag, run_id, 3, logical_date=when)
                    started[dag].extend(r.run_id for r in got.started)
                    if got.created:
                        created[dag].append(got.run.run_id)
        except BaseException as exc:  # noqa: BLE001 - reported below, with the others
            errors.append(exc)
            gate.abort()

    threads = [threading.Thread(target=trigger, args=(k, s)) for k, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    for dag in dags:
        assert sorted(created[dag]) == run_ids, dag  # each run id created once
        running = {r.run_id for r in stores[0].list_dag_runs(dag, state="running")}
        assert len(running) == 3, (dag, sorted(running))  # never over the limit
        assert sorted(started[dag]) == sorted(running), dag  # each started once, and reported
        assert len(stores[0].list_dag_runs(dag, state="queued")) == 9, dag


def test_the_queued_runs_of_many_dags_start_in_one_call_each_under_its_own_limit(
    store: Store,
) -> None:
    for i in range(3):
        store.create_dag_run("a", f"a{i}", logical_date=T0 + timedelta(hours=2 - i))
        store.create_dag_run("b", f"b{i}", logical_date=T0 + timedelta(hours=i))
    store.create_dag_run("c", "c0", logical_date=T0)
    store.start_queued_dag_runs("c", 1)  # c's one slot is taken
    store.create_dag_run("c", "c1", logical_date=T0 + timedelta(hours=1))
    started = store.start_queued_dag_runs_of({"a": 2, "b": 5, "c": 1, "none": 4})
    assert {dag: [r.run_id for r in runs] for dag, runs in started.items()} == {
        "a": ["a2", "a1"],  # oldest logical date first
        "b": ["b0", "b1", "b2"],
        "c": [],
        "none": [],
    }
    assert all(r.state == "running" and r.started_at for runs in started.values() for r in runs)
    assert store.start_queued_dag_runs_of({}) == {}
    assert store.start_queued_dag_runs_of({"a": 2, "b": 5}) == {"a": [], "b": []}


def test_racing_batches_in_opposite_orders_start_each_run_once_and_never_deadlock(
    make_store: MakeStore,
) -> None:
    store = make_store()
    dags = [f"d{i:02d}" for i in range(20)]
    for dag in dags:
        for j in range(4):
            store.create_dag_run(dag, f"r{j}", logical_date=T0 + timedelta(hours=j))
    stores = [make_store() for _ in range(4)]
    started: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(len(stores))

    def batch(s: Store, order: list[str]) -> None:
        gate.wait()
        try:
            for _ in range(5):
                for dag, runs in s.start_queued_dag_runs_of({d: 2 for d in order}).items():
                    started.extend((dag, r.run_id) for r in runs)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    orders = [dags, dags[::-1], dags[5:] + dags[:5], dags[::2] + dags[1::2]]
    threads = [
        threading.Thread(target=batch, args=(s, o)) for s, o in zip(stores, orders, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert sorted(started) == sorted((d, r) for d in dags for r in ("r0", "r1"))


def test_existing_dag_runs_names_which_of_the_pairs_have_a_run(store: Store) -> None:
    store.create_dag_run("a", "r1")
    store.create_dag_run("b", "r2")
    pairs = {("a", "r1"), ("a", "r2"), ("b", "r2"), ("c", "r1")}
    assert store.existing_dag_runs(pairs) == {("a", "r1"), ("b", "r2")}
    assert store.existing_dag_runs(set()) == set()


def test_scheduled_runs_are_created_in_one_fenced_call_once_each(store: Store) -> None:
    store.create_dag_run("a", "tick1", logical_date=T0, trigger="scheduled")  # exists already
    drafts = [
        ScheduledRunDraft("a", "tick1", T0, "scheduled", {}),
        ScheduledRunDraft("a", "tick2", T0 + timedelta(hours=1), "catchup", {"x": 1}),
        ScheduledRunDraft("b", "tick1", T0, "scheduled", {}, failure_reason="cannot start"),
        ScheduledRunDraft("a", "tick2", T0 + timedelta(hours=1), "catchup", {"x": 1}),
    ]
    made = store.create_fenced_dag_runs(drafts, leader_epoch=2)
    assert [(r.dag_id, r.run_id, created) for r, created in made] == [
        ("a", "tick1", False),
        ("a", "tick2", True),
        ("b", "tick1", True),
        ("a", "tick2", False),  # named twice: one run
    ]
    assert made[1][0].state == "queued" and made[1][0].conf == {"x": 1}
    assert made[1][0].trigger == "catchup" and made[1][0].leader_epoch == 2
    failed = made[2][0]
    assert failed.state == "failed" and failed.failure_reason == "cannot start" and failed.ended_at
    assert len(store.list_dag_runs("a")) == 2
    assert store.create_fenced_dag_runs([], leader_epoch=2) == []


def test_a_stale_leader_creates_none_of_its_scheduled_runs(store: Store) -> None:
    store.raise_epoch_floor(5)
    drafts = [ScheduledRunDraft(d, "tick", T0, "scheduled", {}) for d in ("a", "b")]
    with pytest.raises(StaleLeaderError):
        store.create_fenced_dag_runs(drafts, leader_epoch=4)
    assert store.list_dag_runs() == []
    with pytest.raises(StoreError, match="no time zone"):
        store.create_fenced_dag_runs(
            [ScheduledRunDraft("a", "t", datetime(2026, 1, 1), "scheduled", {})], leader_epoch=5
        )
    assert store.list_dag_runs() == []


def _running_counts(store: Store) -> tuple[dict[str, int], dict[str, int]]:
    """The DAGs' running counts as kept (dag_run_counts, zeros left out) and as counted."""
    with store._engine.connect() as conn:
        kept = conn.execute(sa.text("SELECT dag_id, running FROM dag_run_counts")).all()
        counted = conn.execute(
            sa.text("SELECT dag_id, count(*) FROM dag_runs WHERE state = 'running' GROUP BY dag_id")
        ).all()
    return {d: n for d, n in kept if n}, dict(counted)


def test_the_running_count_follows_every_change_of_a_run_whoever_makes_it(store: Store) -> None:
    for i in range(6):
        store.create_dag_run("d", f"r{i}", logical_date=T0 + timedelta(hours=i))
    store.create_dag_run("e", "x")
    steps: list[tuple[dict[str, int], dict[str, int]]] = []

    def check(expected: dict[str, int]) -> None:
        kept, counted = _running_counts(store)
        steps.append((kept, counted))
        assert kept == counted == expected, steps

    check({})
    assert [r.run_id for r in store.start_queued_dag_runs("d", 3)] == ["r0", "r1", "r2"]
    store.mark_dag_run_running("e", "x")
    check({"d": 3, "e": 1})
    store.finish_dag_run("d", "r0", "success")
    check({"d": 2, "e": 1})
    assert store.transition_dag_run("d", "r1", to="cancelled", from_states={"running"})
    assert store.transition_dag_run("e", "x", to="failed", from_states={"running"})
    check({"d": 1})
    assert store.reopen_dag_run("d", "r0")
    check({"d": 2})
    with store._engine.begin() as conn:  # an operator's SQL is counted too
        conn.execute(sa.text("UPDATE dag_runs SET state = 'running' WHERE run_id = 'r3'"))
        conn.execute(sa.text("DELETE FROM dag_runs WHERE run_id = 'r2'"))
        conn.execute(sa.text("UPDATE dag_runs SET conf = '{}' WHERE dag_id = 'd'"))
    check({"d": 2})
    assert [r.run_id for r in store.start_queued_dag_runs("d", 3)] == ["r4"]
    check({"d": 3})
    assert store.start_queued_dag_runs("d", 3) == []


def _end_run(s: Store, run_id: str, i: int) -> None:
    """Stop a running run one of the ways a worker does: the close, or the last task's finish
    and the close in one call."""
    if i % 3 == 0:
        s.finish_dag_run("d", run_id, "success")
        s.start_queued_dag_runs("d", 4)
        return
    key = f"d/{run_id}/last"
    claim = s.claim_task_run(key, dag_id="d", run_id=run_id, task_id="last")
    if claim.token is None:  # cancelled already: its task runs were not to start
        return
    s.finish_and_close(
        key, claim.token, result=i, dag_id="d", run_id=run_id, run_state="success",
        max_active_runs=4,
    )  # fmt: skip


def _trigger_and_end(s: Store, n: int, gate: threading.Barrier, seen: list[Any]) -> None:
    gate.wait()
    try:
        for i in range(15):
            for run in s.create_and_start_dag_run("d", f"w{n}-{i}", 4, logical_date=T0).started:
                _end_run(s, run.run_id, i)
            running = len(s.list_dag_runs("d", state="running", limit=100))
            if running > 4:
                seen.append(f"{running} running")
    except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
        seen.append(exc)


def _cancel_running(s: Store, gate: threading.Barrier, done: threading.Event, seen: list[Any]):
    gate.wait()
    try:
        while not done.is_set():
            for run in s.list_dag_runs("d", state="running", limit=100):
                if s.transition_dag_run("d", run.run_id, to="cancelled", from_states={"running"}):
                    s.start_queued_dag_runs("d", 4)
    except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
        seen.append(exc)


def test_finishes_cancels_and_dispatches_racing_on_one_dag_keep_its_count_and_never_deadlock(
    make_store: MakeStore,
) -> None:
    """Every way a run stops running, at once with triggers and dispatches of the same DAG, and
    an operator cancelling whatever runs: no deadlock (PostgreSQL would abort a transaction with
    a deadlock error), no run over the limit, and the count equal to the running rows at the
    end."""
    stores = [make_store() for _ in range(4)]
    seen: list[Any] = []  # errors, and runs over the limit
    done = threading.Event()
    gate = threading.Barrier(len(stores))
    workers = [
        threading.Thread(target=_trigger_and_end, args=(s, n, gate, seen))
        for n, s in enumerate(stores[1:])
    ]
    canceller = threading.Thread(target=_cancel_running, args=(stores[0], gate, done, seen))
    for t in [*workers, canceller]:
        t.start()
    for t in workers:
        t.join(120)
    done.set()
    canceller.join(30)
    assert not any(t.is_alive() for t in [*workers, canceller])
    assert seen == []
    kept, counted = _running_counts(stores[0])
    assert kept == counted
    assert counted.get("d", 0) == len(stores[0].list_dag_runs("d", state="running", limit=100))


def test_a_queued_run_cancelled_while_a_dispatch_waits_for_it_is_not_started(
    store: Store,
) -> None:
    """PostgreSQL: a dispatch takes the oldest queued runs ``FOR UPDATE`` (migration 0016). A
    cancel that holds the oldest one's row when the dispatch reaches it makes the dispatch wait;
    once the cancel commits, the dispatch leaves that run as it is and starts the next queued
    one in its place (the slot is not lost to the cancelled run)."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite's BEGIN IMMEDIATE serialises the cancel and the dispatch")
    for n in range(3):
        store.create_dag_run("d", f"q{n}", logical_date=T0 + timedelta(minutes=n))
    started: list[list[str]] = []
    with store._engine.connect() as cancel:
        cancel.execute(
            sa.text("UPDATE dag_runs SET state = 'cancelled' WHERE dag_id = 'd' AND run_id = 'q0'")
        )  # in a transaction: q0's row stays locked until the commit below
        dispatch = threading.Thread(
            target=lambda: started.append([r.run_id for r in store.start_queued_dag_runs("d", 1)])
        )
        dispatch.start()

        def waiting() -> bool:
            with store._engine.connect() as probe:
                return bool(
                    probe.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                            " AND query LIKE '%beatflow_start_queued%'"
                        )
                    ).scalar_one()
                )

        wait_for(waiting, timeout=10, message="the dispatch to wait for q0's row")
        cancel.commit()
        dispatch.join(timeout=10)
    assert not dispatch.is_alive()
    assert started == [["q1"]]
    states = {r.run_id: r.state for r in store.list_dag_runs("d")}
    assert states == {"q0": "cancelled", "q1": "running", "q2": "queued"}
