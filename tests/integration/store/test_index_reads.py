"""What the hot reads cost on PostgreSQL, from its own counters (``pg_stat_user_indexes``), on a
database with history that has been analysed as any deployment's is: a dispatch reads a few
entries whatever the number of runs running, its own DAG's or any other's; the stuck-task-run
count reads the running rows' index, not the whole table."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa

from beatflow.store import Store

OTHER_RUNNING = 400  # running runs of another DAG: a dispatch of "mine" must not walk them
MINE_RUNNING = 2000  # and of its own DAG, under a limit in the thousands: nor these


@pytest.fixture
def pg(postgres_url: str) -> Iterator[tuple[Store, str]]:
    store = Store(postgres_url)
    store.upgrade()
    dsn = sa.make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO dag_runs (dag_id, run_id, trigger, conf, state, queued_at, started_at) "
            "SELECT CASE WHEN i <= %s THEN 'other' ELSE 'history' END, 'r' || i, 'manual', "
            "'{}', CASE WHEN i <= %s THEN 'running' ELSE 'success' END, now(), now() "
            "FROM generate_series(1, 20000) i",
            (OTHER_RUNNING, OTHER_RUNNING),
        )
        conn.execute(
            "INSERT INTO task_runs (dedupe_key, dag_id, run_id, task_id, map_index, state, "
            "try_number, lease_expires_at) SELECT 'h/' || i, 'history', 'r' || i, 't', -1, "
            "CASE WHEN i <= 3 THEN 'running' ELSE 'success' END, 1, now() - interval '1 hour' "
            "FROM generate_series(1, 20000) i"
        )
        conn.execute("ANALYZE dag_runs")
        conn.execute("ANALYZE task_runs")
    try:
        yield store, dsn
    finally:
        store.close()


def _index_reads(dsn: str, table: str) -> tuple[dict[str, int], int]:
    """Entries read per index of ``table``, and its sequential scans, as the counters stand."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            "SELECT indexrelname, idx_tup_read FROM pg_stat_user_indexes WHERE relname = %s",
            (table,),
        ).fetchall()
        seq = conn.execute(
            "SELECT seq_scan FROM pg_stat_user_tables WHERE relname = %s", (table,)
        ).fetchone()
    assert seq is not None
    return {name: int(n) for name, n in rows}, int(seq[0])


def _flush(store: Store) -> None:
    """Make the store's backend report its scans now (a backend otherwise reports them within
    about a second of going idle). The store's pool hands back the connection it just used."""
    with store._engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_stat_force_next_flush()"))
        conn.commit()


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def test_a_dispatch_reads_a_few_entries_whatever_the_number_of_runs_running(
    pg: tuple[Store, str],
) -> None:
    store, dsn = pg
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO dag_runs (dag_id, run_id, trigger, conf, state, queued_at, started_at) "
            "SELECT 'mine', 'old' || i, 'manual', '{}', 'running', now(), now() "
            "FROM generate_series(1, %s) i",
            (MINE_RUNNING,),
        )
        conn.execute("ANALYZE dag_runs")
    for n in range(3):
        store.create_dag_run("mine", f"m{n}")
    store.start_queued_dag_runs("mine", MINE_RUNNING + 2)  # warm the function's plans
    store.create_dag_run("mine", "late")
    _flush(store)
    before, seq_before = _index_reads(dsn, "dag_runs")
    started = store.start_queued_dag_runs("mine", 100_000)
    _flush(store)
    after, seq_after = _index_reads(dsn, "dag_runs")
    assert sorted(r.run_id for r in started) == ["late", "m2"]
    read = _delta(before, after)
    assert seq_after == seq_before, "the dispatch scanned dag_runs sequentially"
    # its 2 queued runs and a few entries besides: never the 2,000 running of its own DAG, nor
    # the other DAG's 400 (the free slots come off the DAG's running count, one row)
    assert sum(read.values()) < 40, read


def test_the_stuck_task_run_count_reads_only_running_rows(pg: tuple[Store, str]) -> None:
    store, dsn = pg
    assert store.count_stuck_task_runs() == 3
    _flush(store)
    before, seq_before = _index_reads(dsn, "task_runs")
    assert store.count_stuck_task_runs() == 3
    _flush(store)
    after, seq_after = _index_reads(dsn, "task_runs")
    read = _delta(before, after)
    assert seq_after == seq_before, "the count scanned task_runs sequentially"
    assert read == {"ix_task_runs_running_lease_expires_at": 3}, read
