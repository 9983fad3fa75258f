"""Cost of the claim protocol per task run: claim (insert-or-conflict) + finish (conditional
update) on PostgreSQL and on SQLite, in µs, single-threaded, as a worker's wrapper calls them.

    python bench/bench_store.py [--runs 3000] [--postgres-admin-url URL]

Each backend gets a fresh database (PostgreSQL: a throwaway database created and dropped on the
server behind --postgres-admin-url; SQLite: a WAL file in a temporary folder)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from beatflow.store import Store

DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    name = f"bench_store_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def sqlite_database() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as folder:
        yield f"sqlite:///{Path(folder) / 'bench.db'}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(url: str, runs: int) -> dict[str, float]:
    store = Store(url)
    store.upgrade()
    store.create_dag_run("bench", "r")
    claims: list[float] = []
    finishes: list[float] = []
    duplicates: list[float] = []
    clock: Callable[[], int] = time.perf_counter_ns
    warmup = max(100, runs // 10)
    for i in range(warmup + runs):
        key = f"bench/r/t{i}"
        t0 = clock()
        claim = store.claim_task_run(
            key, dag_id="bench", run_id="r", task_id=f"t{i}", worker="bench", celery_task_id=str(i)
        )
        t1 = clock()
        assert claim.outcome == "run" and claim.token is not None
        assert store.finish_task_run(key, claim.token, state="success", result={"i": i})
        t2 = clock()
        again = store.claim_task_run(key, dag_id="bench", run_id="r", task_id=f"t{i}")
        t3 = clock()
        assert again.outcome == "done"
        if i >= warmup:
            claims.append((t1 - t0) / 1000)
            finishes.append((t2 - t1) / 1000)
            duplicates.append((t3 - t2) / 1000)
    store.close()
    totals = [c + f for c, f in zip(claims, finishes, strict=True)]
    return {
        "claim": statistics.mean(claims),
        "finish": statistics.mean(finishes),
        "total": statistics.mean(totals),
        "p50": percentile(totals, 0.50),
        "p99": percentile(totals, 0.99),
        "duplicate": statistics.mean(duplicates),
    }


def measure_raw_psycopg(url: str, runs: int) -> dict[str, float]:
    """The floor: the same two writes through bare psycopg (no pool, no pre-ping, no ORM)."""
    import psycopg

    store = Store(url)
    store.upgrade()  # the real schema, so index maintenance costs the same
    store.close()
    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    claims: list[float] = []
    finishes: list[float] = []
    warmup = max(100, runs // 10)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(warmup + runs):
            t0 = time.perf_counter_ns()
            conn.execute(
                "INSERT INTO task_runs (dedupe_key, dag_id, run_id, task_id, map_index, state, "
                "try_number, lease_token, lease_expires_at, started_at) VALUES "
                "(%s, 'raw', 'r', %s, -1, 'running', 1, %s, now(), now()) "
                "ON CONFLICT (dedupe_key) DO NOTHING RETURNING *",
                (f"raw/r/t{i}", f"t{i}", "tok"),
            ).fetchone()
            t1 = time.perf_counter_ns()
            conn.execute(
                "UPDATE task_runs SET state='success', result=%s, ended_at=now(), "
                "lease_token=NULL WHERE dedupe_key=%s AND lease_token=%s AND state='running'",
                ('{"i": 1}', f"raw/r/t{i}", "tok"),
            )
            t2 = time.perf_counter_ns()
            if i >= warmup:
                claims.append((t1 - t0) / 1000)
                finishes.append((t2 - t1) / 1000)
    totals = [c + f for c, f in zip(claims, finishes, strict=True)]
    return {
        "claim": statistics.mean(claims),
        "finish": statistics.mean(finishes),
        "total": statistics.mean(totals),
        "p50": percentile(totals, 0.50),
        "p99": percentile(totals, 0.99),
        "duplicate": float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000, help="task runs per backend")
    parser.add_argument(
        "--postgres-admin-url",
        default=DEFAULT_ADMIN_URL,
        help="a PostgreSQL URL allowed to CREATE DATABASE",
    )
    args = parser.parse_args()

    rows: list[tuple[str, dict[str, float]]] = []
    with postgres_database(args.postgres_admin_url) as url:
        rows.append(("PostgreSQL (loopback)", measure(url, args.runs)))
    with postgres_database(args.postgres_admin_url) as url:
        rows.append(("bare psycopg (floor)", measure_raw_psycopg(url, args.runs)))
    with sqlite_database() as url:
        rows.append(("SQLite (WAL file)", measure(url, args.runs)))

    print(f"claim + finish per task run, {args.runs} task runs per backend, one thread (µs)")
    header = ("backend", "claim", "finish", "claim+finish", "p50", "p99", "dup. claim")
    print(f"| {header[0]:<21} | " + " | ".join(f"{h:>12}" for h in header[1:]) + " |")
    print(f"|{'-' * 23}|" + "|".join("-" * 13 + ":" for _ in header[1:]) + "|")
    for name, r in rows:
        values = (r["claim"], r["finish"], r["total"], r["p50"], r["p99"], r["duplicate"])
        cells = ("-" if v != v else f"{v:.0f}" for v in values)  # NaN: not measured
        print(f"| {name:<21} | " + " | ".join(f"{c:>12}" for c in cells) + " |")


if __name__ == "__main__":
    main()
