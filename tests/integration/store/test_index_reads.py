"""What the hot reads cost on PostgreSQL, from its own counters (``pg_stat_user_indexes``), on a
database with history that has been analysed as any deployment's is: a dispatch reads a few
entries whatever the number of runs running, its own DAG's or any other's; a close reads its
own DAG's queued runs whatever the number of other DAGs' queued; the stuck-task-run count reads
the running rows' index, not the whole table. On SQLite, which keeps no such counters, the
close's cost is counted in its virtual machine's steps."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import psycopg
import pytest
import sqlalchemy as sa

from beatflow.store import Store
from beatflow.store.records import ScheduledRunDraft

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


RUNNING_ELSEWHERE = 5000  # task runs running on other workers (a wide map on a big cluster)


def test_a_task_runs_finish_and_lease_renewal_read_its_own_row_whatever_is_running(
    pg: tuple[Store, str],
) -> None:
    """Every finish and lease renewal of a task run names its key, its lease token and
    ``state = 'running'``. When the last ANALYZE found no task run running (a quiet hour;
    autovacuum is off here so it cannot run another), PostgreSQL costed the running rows'
    partial index as empty and answered them through it, filtering on the key: every task run
    running read per finish, 5,000 here, quadratic in a wide map's width. The index now also
    names ``lease_expires_at IS NOT NULL`` (migration 0017), which only the stuck-run scans
    imply, so a finish goes by its key."""
    store, dsn = pg
    with psycopg.connect(dsn, autocommit=True) as conn:
        # the last look at the table found nothing running (a quiet hour), and no other comes
        conn.execute("UPDATE task_runs SET state = 'success' WHERE state = 'running'")
        conn.execute("VACUUM ANALYZE task_runs")
        conn.execute("ALTER TABLE task_runs SET (autovacuum_enabled = off)")
        conn.execute(
            "INSERT INTO task_runs (dedupe_key, dag_id, run_id, task_id, map_index, state, "
            "try_number, lease_token, lease_expires_at) SELECT 'busy/' || i, 'busy', 'r', 'm', "
            "i, 'running', 1, md5(i::text), now() + interval '1 hour' "
            "FROM generate_series(1, %s) i",
            (RUNNING_ELSEWHERE,),
        )
    store.create_dag_run("mine", "r1")

    def claim(task_id: str) -> tuple[str, str]:
        key = f"mine/r1/{task_id}"
        got = store.claim_task_run(key, dag_id="mine", run_id="r1", task_id=task_id)
        assert got.outcome == "run" and got.token is not None
        return key, got.token

    def finish_one(n: int) -> None:
        key, token = claim(f"t{n}")
        assert store.renew_lease(key, token)
        assert store.finish_task_run(key, token, state="success", result=n)

    for n in range(6):  # past the driver's and the server's first executions: generic plans
        finish_one(n)
    closing = claim("last")
    _flush(store)
    before, seq_before = _index_reads(dsn, "task_runs")
    finish_one(6)
    done = store.finish_and_close(
        *closing, result=None, dag_id="mine", run_id="r1", run_state="success",
        max_active_runs=16,
    )  # fmt: skip
    _flush(store)
    after, seq_after = _index_reads(dsn, "task_runs")
    assert done.written and done.closed is not None and done.closed.state == "success"
    read = _delta(before, after)
    assert seq_after == seq_before, "a finish scanned task_runs sequentially"
    # a claim, a renewal and two finishes: a few probes of the key index, not 5,000 entries
    assert sum(read.values()) < 20, read


OTHER_DAGS = 50  # DAGs with runs queued behind their limits, as after a beat's busy minute
QUEUED_EACH = 20  # queued runs each: 1,000 queued, none of them "mine"


def _queue_behind_others(dsn: str) -> None:
    """1,000 runs of 50 other DAGs queued after the last ANALYZE, which saw none queued (the
    statistics of a deployment whose minute has just fired: queued rows look rare)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO dag_runs (dag_id, run_id, trigger, conf, state, queued_at, logical_date) "
            "SELECT 'busy' || (i %% %s), 'q' || i, 'scheduled', '{}', 'queued', now(), "
            "now() + i * interval '1 second' FROM generate_series(1, %s) i",
            (OTHER_DAGS, OTHER_DAGS * QUEUED_EACH),
        )


@pytest.mark.parametrize(
    ("mine", "mine_queued"), [("mine", 0), ("mine", 2), ("history", 0), ("history", 2)]
)
def test_a_close_reads_its_own_dags_queued_runs_not_every_dags(
    pg: tuple[Store, str], mine: str, mine_queued: int
) -> None:
    """A run's close looks for its DAG's queued runs (``beatflow_start_queued``): with a
    thousand runs of other DAGs queued, it reads its own DAG's entries, not theirs. Before the
    partial index over queued rows, PostgreSQL walked ``(state, id)`` filtering on the DAG, a
    thousand entries per close while the queue drained: quadratic in the queue. Nor does it
    walk its own DAG's history ("history" has 19,600 finished runs)."""
    store, dsn = pg
    _queue_behind_others(dsn)
    store.create_dag_run("warm", "w0")
    store.start_queued_dag_runs("warm", 10)  # the function's plans, made before the count
    for n in range(mine_queued):
        store.create_dag_run(mine, f"m{n}")
    _flush(store)
    before, seq_before = _index_reads(dsn, "dag_runs")
    started = store.start_queued_dag_runs(mine, 10)
    _flush(store)
    after, seq_after = _index_reads(dsn, "dag_runs")
    assert len(started) == mine_queued
    read = _delta(before, after)
    assert seq_after == seq_before, "the close scanned dag_runs sequentially"
    assert sum(read.values()) < 40, read
    # and the oldest queued run of a busy DAG is found among its own 20, not the 1,000
    _flush(store)
    before, _ = _index_reads(dsn, "dag_runs")
    assert [r.run_id for r in store.start_queued_dag_runs("busy7", 1)] == ["q7"]
    _flush(store)
    after, _ = _index_reads(dsn, "dag_runs")
    read = _delta(before, after)
    assert sum(read.values()) < 40 + QUEUED_EACH, read


def _queue_sqlite(store: Store, dag_ids: list[str], each: int) -> None:
    with store._engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO dag_runs (dag_id, run_id, trigger, conf, state, queued_at, "
                "logical_date) VALUES (:d, :r, 'scheduled', '{}', 'queued', CURRENT_TIMESTAMP, "
                "CURRENT_TIMESTAMP)"
            ),
            [{"d": d, "r": f"q{n}"} for d in dag_ids for n in range(each)],
        )


def _steps(store: Store, work: Callable[[], object]) -> int:
    """SQLite virtual machine steps ``work`` runs, from a progress handler called on every
    step of the store's connection (the same count on any machine)."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0  # go on

    def hook(conn: sa.Connection, *_: object) -> None:
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.set_progress_handler(count, 1)

    sa.event.listen(store._engine, "before_cursor_execute", hook)
    try:
        work()
    finally:
        sa.event.remove(store._engine, "before_cursor_execute", hook)
    return steps


def test_on_sqlite_a_close_does_not_walk_other_dags_queued_runs(sqlite_url: str) -> None:
    """The same close on the embedded database: its cost with a thousand runs of other DAGs
    queued is about its cost with none (before, SQLite looked through ``(state, id)``, every
    DAG's queued runs, for the DAG's first one)."""
    store = Store(sqlite_url)
    store.upgrade()
    try:
        _queue_sqlite(store, ["mine"], 2)
        for _ in range(3):  # warm: the statements compiled, the connection made
            store.start_queued_dag_runs("empty", 10, if_queued=True)
        alone = _steps(store, lambda: store.start_queued_dag_runs("empty", 10, if_queued=True))
        dispatch_alone = _steps(store, lambda: store.start_queued_dag_runs("mine", 1))
        _queue_sqlite(store, [f"busy{d}" for d in range(OTHER_DAGS)], QUEUED_EACH)
        busy = _steps(store, lambda: store.start_queued_dag_runs("empty", 10, if_queued=True))
        dispatch_busy = _steps(store, lambda: store.start_queued_dag_runs("mine", 1))
    finally:
        store.close()
    # a few steps per entry read: walking the 1,000 others would cost thousands more
    assert busy < alone + 200, (alone, busy)
    assert dispatch_busy < dispatch_alone + 200, (dispatch_alone, dispatch_busy)


TICK_DAGS = 20  # DAGs due on one tick, as one fire batch holds them
TICK_HISTORY = 1000  # earlier runs of each: a minutely DAG's last 17 hours


def _tick_with_history(dsn: str) -> list[tuple[str, str]]:
    """``TICK_DAGS`` DAGs, each with ``TICK_HISTORY`` finished runs and the run of tick "t9"
    (every DAG's run of one tick has the same run id), made after the last ANALYZE: statistics
    that call each DAG rare, as a deployment's are for DAGs that grew since autovacuum looked
    (and as the bench's were)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO dag_runs (dag_id, run_id, trigger, conf, state, queued_at, logical_date) "
            "SELECT 'tick' || (i %% %s), CASE WHEN i < %s THEN 't9' ELSE 'h' || i END, "
            "'scheduled', '{}', CASE WHEN i < %s THEN 'queued' ELSE 'success' END, now(), "
            "now() - i * interval '1 minute' FROM generate_series(0, %s) i",
            (TICK_DAGS, TICK_DAGS, TICK_DAGS, TICK_DAGS * (TICK_HISTORY + 1) - 1),
        )
    return [(f"tick{n}", "t9") for n in range(TICK_DAGS)]


@pytest.mark.parametrize("lookup", ["existing runs", "creating them again"])
def test_looking_up_one_ticks_runs_reads_their_own_entries_not_each_dags_history(
    pg: tuple[Store, str], lookup: str
) -> None:
    """A fire batch looks up the runs of one tick of many DAGs (``existing_dag_runs``), and
    creating runs that exist reads them back. Written as ``(dag_id, run_id) IN (...)``, the
    planner took the run id the keys share out of the list and read every run each DAG ever
    had through ``(dag_id, id)``: 1,000 entries a DAG here, a minutely DAG's whole history in a
    deployment, on every fire."""
    store, dsn = pg
    keys = _tick_with_history(dsn)
    wanted = {*keys, ("tick0", "t8"), ("nobody", "t9")}

    def look() -> object:
        if lookup == "existing runs":
            return store.existing_dag_runs(wanted)
        drafts = [
            ScheduledRunDraft(d, r, datetime(2030, 1, 1, tzinfo=UTC), "scheduled", {})
            for d, r in keys
        ]
        return {(run.dag_id, run.run_id) for run, _ in store.create_dag_runs(drafts)}

    assert look() == set(keys)  # warm: the statement compiled, the connection made
    _flush(store)
    before, seq_before = _index_reads(dsn, "dag_runs")
    assert look() == set(keys)
    _flush(store)
    after, seq_after = _index_reads(dsn, "dag_runs")
    read = _delta(before, after)
    assert seq_after == seq_before, "the lookup scanned dag_runs sequentially"
    # one probe of the unique index per key (and per conflicting insert): not 20,000
    assert sum(read.values()) <= 3 * len(wanted), read
