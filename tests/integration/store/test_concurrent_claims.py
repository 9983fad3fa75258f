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
def test_eight_processes_claiming_the_same_thousand_keys_run_each_key_exactly_once(
    database_url: str,
) -> None:
    store = Store(database_url)
    store.upgrade()
    engine = claimers.side_effect_engine(database_url)
    claimers.metadata.create_all(engine)

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    report = ctx.Queue()
    procs = [
        ctx.Process(target=claimers.claim_all, args=(database_url, KEYS, n, barrier, report))
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

    assert sorted(per_key) == KEYS
    assert set(per_key.values()) == {1}, "some key executed more than once"
    assert sum(r[1] for r in reports) == len(KEYS)  # "run" outcomes, all processes together
    assert all(r[4] == 0 for r in reports), "a claimer gave up on held keys"
    assert len({r[0] for r in reports if r[1] > 0}) > 1, "no real race: one process ran all"

    runs = store.get_task_runs("race", "r")
    store.close()
    assert len(runs) == len(KEYS)
    assert {(r.state, r.try_number) for r in runs} == {("success", 1)}
    assert all(r.result == executors[r.dedupe_key] for r in runs)
