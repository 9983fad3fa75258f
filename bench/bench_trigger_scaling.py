"""What one ``trigger_dag`` costs as the DAG's running runs pile up, for a DAG whose limit is in
the thousands. Before migration 0012 the dispatch counted the DAG's running runs (up to
``max_active_runs``) on every trigger, so the cost grew with the number running; it reads one
count row now. No worker runs: every triggered run stays
running, and the broker's queue is emptied between steps. Beside the time, the dag_runs index
entries PostgreSQL read per trigger (``pg_stat_user_indexes``), which timing noise does not move.

    .venv/bin/python bench/bench_trigger_scaling.py [--runs 10000] [--steps 5]
        [--redis redis://127.0.0.1:6408/5] [--pg postgresql://postgres@127.0.0.1:5432]

A throwaway database (bench_trigger_scaling) is created on --pg and dropped at the end."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]

from beatflow.app import create_app  # noqa: E402
from beatflow.runs import trigger_dag  # noqa: E402
from beatflow.runtime import runtime_of  # noqa: E402
from beatflow.settings import Settings  # noqa: E402
from beatflow.store import Store  # noqa: E402

DB = "bench_trigger_scaling"
DAG_MODULE = """
from beatflow import DAG, task


@task
def noop() -> None:
    return None


with DAG("b_many", max_active_runs=1_000_000):
    noop.override(task_id="only")()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--redis", default="redis://127.0.0.1:6408/5")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    args = parser.parse_args()
    with psycopg.connect(f"{args.pg}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{DB}"')
    broker = redis.Redis.from_url(args.redis)
    broker.flushdb()
    dags = Path(tempfile.mkdtemp(prefix="beatflow-trigger-scaling-"))
    (dags / "b_many.py").write_text(DAG_MODULE)
    env = {
        "BEATFLOW_BROKER_URL": args.redis,
        "BEATFLOW_DATABASE_URL": f"{args.pg}/{DB}".replace(
            "postgresql://", "postgresql+psycopg://"
        ),
        "BEATFLOW_DAGS_FOLDER": str(dags),
        "BEATFLOW_LOG_LEVEL": "WARNING",
    }
    settings = Settings.from_env(env)
    store = Store.from_settings(settings)
    store.upgrade()
    app = create_app(settings)
    step = args.runs // args.steps
    print("running runs before | one trigger_dag | dag_runs index entries read per trigger")
    try:
        for k in range(args.steps):
            read_before = index_reads(args.pg, store)
            started = time.perf_counter()
            for _ in range(step):
                trigger_dag(runtime_of(app), "b_many")
            each = (time.perf_counter() - started) / step
            read = (index_reads(args.pg, store) - read_before) / step
            print(f"{k * step:19,d} | {each * 1000:12.2f} ms | {read:.1f}", flush=True)
            broker.flushdb()
    finally:
        store.close()
        app.close()
        broker.flushdb()
        with psycopg.connect(f"{args.pg}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')


def index_reads(pg: str, store: Store) -> int:
    """Index entries read from dag_runs so far, by PostgreSQL's own counters: the store's
    connections are closed first, which makes each report its counts."""
    store._engine.dispose()
    with psycopg.connect(f"{pg}/{DB}", autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes "
            "WHERE relname = 'dag_runs'"
        ).fetchone()
    assert row is not None
    return int(row[0])


if __name__ == "__main__":
    main()
