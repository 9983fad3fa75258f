"""``beatflow.task_value`` finds a task run by its Celery task id through the index of that
column (migration 0021): a point read on a PostgreSQL history of 20,000 task runs, analysed as
any deployment's is, not a scan of the table."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from beatflow.store import Store
from tests.integration.store import test_index_reads as reads


@pytest.fixture
def history(postgres_url: str) -> Iterator[tuple[Store, str]]:
    store = Store(postgres_url)
    store.upgrade()
    dsn = reads.sa.make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO task_runs (dedupe_key, dag_id, run_id, task_id, map_index, state, "
            "try_number, celery_task_id, result) SELECT 'h/' || i, 'history', 'r' || i, 't', "
            "-1, 'success', 1, md5(i::text), to_jsonb(i) FROM generate_series(1, 20000) i"
        )
        conn.execute("ANALYZE task_runs")
    try:
        yield store, dsn
    finally:
        store.close()


def test_a_task_run_is_read_by_its_celery_task_id_through_its_index(
    history: tuple[Store, str],
) -> None:
    store, dsn = history
    with psycopg.connect(dsn, autocommit=True) as conn:
        wanted = conn.execute("SELECT md5('12345')").fetchone()
    assert wanted is not None
    reads._flush(store)
    before, seq_before = reads._index_reads(dsn, "task_runs")
    record = store.get_task_run_by_celery_id(wanted[0])
    reads._flush(store)
    after, seq_after = reads._index_reads(dsn, "task_runs")
    assert record is not None and record.run_id == "r12345" and record.result == 12345
    assert seq_after == seq_before, "the read scanned task_runs sequentially"
    assert reads._delta(before, after) == {"ix_task_runs_celery_task_id": 1}
    assert store.get_task_run_by_celery_id("no-such-id") is None
