"""What one .map() instance costs the results DB as the map widens: its read-and-claim and its
finish, with the items recorded at expansion (``map_items``, what an expansion writes) against
the same read taking the item out of the source's result (``result -> i``, what runs expanded
before migration 0011 read). PostgreSQL backend CPU from /proc, per instance.

    .venv/bin/python bench/bench_map_reads.py [--widths 1000,10000,30000] [--instances 3000]
        [--pg postgresql://postgres@127.0.0.1:5432]

Single process, one connection; a throwaway database (bench_map_reads) is created and dropped.
The recorded side's one write of all ``width`` items is timed on its own."""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]

from beatflow.store import Store  # noqa: E402

DB = "bench_map_reads"
TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    return (int(fields[11]) + int(fields[12])) / TICK


def trial(store: Store, pid: int, run_id: str, width: int, instances: int, record: bool) -> str:
    store.create_dag_run("m", run_id, logical_date=datetime.now(UTC))
    store.start_queued_dag_runs("m", 1_000_000)
    source, expander = f"m/{run_id}/items", f"m/{run_id}/each"
    for key, task_id, outcome in (
        (source, "items", {"result": list(range(width))}),
        (expander, "each", {"map_count": width}),
    ):
        claim = store.claim_task_run(key, dag_id="m", run_id=run_id, task_id=task_id)
        assert claim.token is not None
        store.finish_task_run(key, claim.token, state="success", **outcome)  # type: ignore[arg-type]
    written = ""
    if record:
        cpu, started = backend_cpu(pid), time.perf_counter()
        store.record_map_items("m", run_id, "each", list(range(width)))
        wall = (time.perf_counter() - started) * 1000
        written = (
            f"writing the items: {wall:.0f} ms, {(backend_cpu(pid) - cpu) * 1000:.0f} ms PG CPU; "
        )
    cpu, started = backend_cpu(pid), time.perf_counter()
    for i in range(instances):
        key = f"m/{run_id}/each[{i}]"
        _, rows, claim = store.read_and_claim(
            "m", run_id, "each", i, key, [source], also=[expander], element=(source, i)
        )
        assert claim is not None and claim.token is not None
        assert [t.result for t in rows if t.task_id == "items"] == [i]
        store.finish_task_run(key, claim.token, state="success", result=i)
    wall = (time.perf_counter() - started) / instances * 1000
    pg = (backend_cpu(pid) - cpu) / instances * 1000
    return f"{written}{wall:.2f} ms wall, {pg:.2f} ms PG CPU per instance"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--widths", default="1000,10000,30000")
    parser.add_argument("--instances", type=int, default=3000)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    args = parser.parse_args()
    with psycopg.connect(f"{args.pg}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{DB}"')
    store = Store(f"{args.pg}/{DB}".replace("postgresql://", "postgresql+psycopg://"))
    try:
        store.upgrade()
        with store._read("reading the backend's pid") as conn:
            pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        print("width | items recorded | item taken from the source's list")
        for width in (int(w) for w in args.widths.split(",")):
            n = min(width, args.instances)
            recorded = trial(store, pid, f"rec-{width}", width, n, True)
            source = trial(store, pid, f"src-{width}", width, n, False)
            print(f"{width:,} | {recorded} | {source}", flush=True)
    finally:
        store.close()
        with psycopg.connect(f"{args.pg}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')


if __name__ == "__main__":
    main()
