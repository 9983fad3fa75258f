"""Concurrency: 8 OS processes claim the same 1,000 dedupe keys at once; each key's task runs
exactly once (counted as side-effect rows in a separate, non-unique table)."""

from __future__ import annotations

import multiprocessing
import queue

import pytest
import sqlalchemy as sa

from beatflow.store import Store
from tests.integration.store import claimers

PROCESSES = 8
KEYS = [f"race/r/task-{i:04d}" for i in range(1000)]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("combined", [False, True], ids=["claim", "read_and_claim"])
def test_eight_processes_claiming_the_same_thousand_keys_run_each_key_exactly_once(
    database_url: str, combined: bool
) -> None:
    keys = KEYS[:200] if combined else KEYS  # the same race; the suite's time matters
    store = Store(database_url)
    store.upgrade()
    if combined:  # the node's read-and-claim needs the DAG run, active
        from datetime import UTC, datetime

        store.create_dag_run("race", "r", logical_date=datetime.now(UTC))
        assert [r.run_id for r in store.start_queued_dag_runs("race", 1)] == ["r"]
    engine = claimers.side_effect_engine(database_url)
    claimers.metadata.create_all(engine)

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    report = ctx.Queue()
    procs = [
        ctx.Process(
            target=claimers.claim_all, args=(database_url, keys, n, barrier, report, combined)
        )
        for n in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    reports = []
    try:
        for _ in procs:
            reports.append(report.get(timeout=240))
    except queue.Empty:
        pytest.fail(f"only {len(reports)} of {PROCESSES} claimers reported: {reports}")
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    assert [p.exitcode for p in procs] == [0] * PROCESSES

    with engine.connect() as conn:
        per_key = dict(
            conn.execute(
                sa.select(claimers.side_effects.c.dedupe_key, sa.func.count()).group_by(
                    claimers.side_effects.c.dedupe_key
                )
            ).all()
        )
        executors = dict(
            conn.execute(
                sa.select(claimers.side_effects.c.dedupe_key, claimers.side_effects.c.worker)
            ).all()
        )
    engine.dispose()

    assert sorted(per_key) == keys
    assert set(per_key.values()) == {1}, "some key executed more than once"
    assert sum(r[1] for r in reports) == len(keys)  # "run" outcomes, all processes together
    assert all(r[4] == 0 for r in reports), "a claimer gave up on held keys"
    assert len({r[0] for r in reports if r[1] > 0}) > 1, "no real race: one process ran all"

    runs = store.get_task_runs("race", "r")
    store.close()
    assert len(runs) == len(keys)
    assert {(r.state, r.try_number) for r in runs} == {("success", 1)}
    assert all(r.result == executors[r.dedupe_key] for r in runs)


def _expire(store: Store, key: str) -> None:
    """Age the lease of ``key`` as if its worker died an hour ago."""
    from datetime import UTC, datetime, timedelta

    from beatflow.store.models import task_runs

    with store._write("ageing a lease") as conn:  # test setup
        conn.execute(
            sa.update(task_runs)
            .where(task_runs.c.dedupe_key == key)
            .values(lease_expires_at=datetime.now(UTC) - timedelta(hours=1))
        )


def _claim(store: Store, key: str, worker: str):  # type: ignore[no-untyped-def]
    return store.claim_task_run(key, dag_id="race", run_id="r", task_id="t", worker=worker)


def _together(n: int, fn):  # type: ignore[no-untyped-def]
    """Run fn(i) for i in range(n) in n threads released at once; their results in order."""
    import threading

    barrier = threading.Barrier(n)
    out: list[object] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        out[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


@pytest.mark.slow
def test_workers_taking_over_one_expired_lease_at_once_make_exactly_one_new_try(
    database_url: str,
) -> None:
    stores = [Store(database_url) for _ in range(6)]
    stores[0].upgrade()
    try:
        for round_ in range(15):
            key = f"race/r/takeover-{round_}"
            dead = _claim(stores[0], key, "dead")
            _expire(stores[0], key)
            claims = _together(6, lambda i, key=key: _claim(stores[i], key, f"w{i}"))
            winners = [c for c in claims if c.outcome == "run"]  # type: ignore[attr-defined]
            assert len(winners) == 1, [c.outcome for c in claims]  # type: ignore[attr-defined]
            assert {c.outcome for c in claims} <= {"run", "held"}  # type: ignore[attr-defined]
            assert winners[0].record.try_number == 2
            assert not stores[0].finish_task_run(key, dead.token or "", state="success")
    finally:
        for s in stores:
            s.close()


@pytest.mark.slow
def test_a_claim_racing_the_holders_finish_never_runs_a_finished_task_run_again(
    database_url: str,
) -> None:
    stores = [Store(database_url) for _ in range(2)]
    stores[0].upgrade()
    try:
        # Race until both orders have happened (the takeover wins ~10% of the rounds on
        # PostgreSQL, ~half on SQLite, measured on a loaded 2-core machine): a check of both
        # branches, not of whichever order this machine happens to favour.
        outcomes: set[bool] = set()
        rounds = 0
        while rounds < 30 or (len(outcomes) < 2 and rounds < 1000):
            key = f"race/r/finish-{rounds}"
            rounds += 1
            holder = _claim(stores[0], key, "holder")
            _expire(stores[0], key)  # the holder is slow: its lease ran out as it finishes

            def step(i: int, key: str = key, token: str = holder.token or "") -> object:
                if i == 0:
                    return stores[0].finish_task_run(key, token, state="success", result="first")
                return _claim(stores[1], key, "racer")

            finished, racer = _together(2, step)
            row = stores[0].get_task_run(key)
            assert row is not None
            if finished:  # the finish won: the racer must see it done, never run it
                assert racer.outcome == "done" and row.result == "first"  # type: ignore[attr-defined]
            else:  # the takeover won: the stale finish wrote nothing
                assert racer.outcome == "run" and row.state == "running"  # type: ignore[attr-defined]
                assert row.try_number == 2
            outcomes.add(bool(finished))
        assert outcomes == {True, False}, f"only finish-won={outcomes} in {rounds} rounds"
    finally:
        for s in stores:
            s.close()
