"""What beatflow's node path costs on its own, next to the floor's two bare statements: one-task
runs executed eagerly in this process (``task.apply``: Celery's tracer, the node wrapper, its
read-and-claim and its finish-and-close; no broker hand-off, no pool), then the same number of
bare autocommit INSERT + UPDATE pairs (bench/raw_app.py's ``claim_and_finish``). A diagnostic
beside bench_throughput.py, not a bench of its own: ``make bench`` does not run it.

    .venv/bin/python bench/node_path.py [--runs 1000] [--rounds 3] [--profile 0]
        [--statements] [--server-phases]
        [--redis redis://127.0.0.1:6408] [--pg postgresql://postgres@127.0.0.1:5432]

Prints, per round, CPU and wall ms and the bytes of WAL written per run for each side (medians
over the rounds at the end).
``--profile N``: then one more round of the node path under cProfile (CPU time), with the N
functions of most own time. ``--statements``: then one more round of each side with every
statement's ``execute`` timed (wall, and this thread's CPU: the rest is the server's time and
the commit's flush), medians by statement. ``--server-phases``: then one more round of each side
with PostgreSQL reporting each statement's bind and execute time (its own duration log lines,
sent to the client: no server log is read); what a statement's wall time has beyond its client
CPU and these two is the round trip and the commit (its WAL flush)."""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import logging
import pstats
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import redis
import sqlalchemy as sa
from celery import signals

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT / "bench")]

import raw_app  # noqa: E402
from bench_throughput import BENCH_DAGS, fresh_database, seed_history  # noqa: E402

from beatflow.app import create_app  # noqa: E402
from beatflow.runs import trigger_dags  # noqa: E402
from beatflow.runtime import runtime_of  # noqa: E402
from beatflow.settings import Settings  # noqa: E402
from beatflow.store import Store  # noqa: E402


def per_run(
    work: Callable[[], None], runs: int, conn: psycopg.Connection[Any]
) -> tuple[float, float, float]:
    """(CPU ms, wall ms, WAL bytes) per run of ``work``; the WAL is the server's (read on
    ``conn``), so it is this side's only while nothing else writes."""
    before = _wal_bytes(conn)
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return (
        (time.process_time() - cpu) * 1000 / runs,
        (time.perf_counter() - wall) * 1000 / runs,
        (_wal_bytes(conn) - before) / runs,
    )


def _wal_bytes(conn: psycopg.Connection[Any]) -> float:
    """The server's WAL insert position in bytes (exact, unlike pg_stat_wal's counters, which a
    backend flushes at most once a second)."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    return float(row[0]) if row else 0.0


# the statements told apart by a piece of their text (the rest go by their first words)
_KINDS = (
    ("beatflow_finish_and_close", "finish-and-close"),
    ("WITH p AS", "read-and-claim"),
    ("INSERT INTO raw_durable", "bare INSERT"),
    ("UPDATE raw_durable", "bare UPDATE"),
)


@contextlib.contextmanager
def timing_statements() -> Iterator[dict[str, list[tuple[float, float]]]]:
    """Every psycopg ``Cursor.execute`` in the block timed: (wall s, this thread's CPU s) by
    statement kind."""
    took: dict[str, list[tuple[float, float]]] = defaultdict(list)
    plain = psycopg.Cursor.execute

    def timed(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return plain(self, query, params, **kwargs)
        finally:
            text = str(query)
            kind = next((k for part, k in _KINDS if part in text), " ".join(text.split()[:3]))
            took[kind].append((time.perf_counter() - wall, time.thread_time() - cpu))

    psycopg.Cursor.execute = timed  # type: ignore[method-assign]
    try:
        yield took
    finally:
        psycopg.Cursor.execute = plain  # type: ignore[method-assign]


# PostgreSQL's duration line for one phase of a prepared statement (log_min_duration_statement)
_PHASE = re.compile(r"duration: ([0-9.]+) ms\s+(bind|execute) [^:]*: (.*)", re.S)


@contextlib.contextmanager
def server_phases(
    engine: sa.Engine, conn: psycopg.Connection[Any]
) -> Iterator[dict[str, list[float]]]:
    """Server time (ms) by statement kind and phase, for ``conn`` and every connection ``engine``
    makes in the block (its pool is emptied first): each session logs every statement's phases
    (``log_min_duration_statement = 0``) and gets those lines as notices
    (``client_min_messages = log``)."""
    took: dict[str, list[float]] = defaultdict(list)

    def notice(diag: psycopg.errors.Diagnostic) -> None:
        found = _PHASE.match(diag.message_primary or "")
        if found is not None:
            ms, phase, text = found.groups()
            kind = next((k for part, k in _KINDS if part in text), " ".join(text.split()[:3]))
            took[f"{kind} {phase}"].append(float(ms))

    def log_phases(driver: psycopg.Connection[Any]) -> None:
        was, driver.autocommit = driver.autocommit, True  # a SET in a rolled-back block is undone
        driver.execute("SET log_min_duration_statement = 0")
        driver.execute("SET client_min_messages = log")
        driver.autocommit = was
        driver.add_notice_handler(notice)

    def on_connect(driver: Any, _record: Any) -> None:
        log_phases(driver)

    engine.dispose()
    sa.event.listen(engine, "connect", on_connect)
    log_phases(conn)
    try:
        yield took
    finally:
        sa.event.remove(engine, "connect", on_connect)
        engine.dispose()
        conn.remove_notice_handler(notice)
        conn.execute("RESET log_min_duration_statement")
        conn.execute("RESET client_min_messages")


def report_phases(took: dict[str, list[float]], runs: int) -> None:
    print(f"\nserver time by phase (PostgreSQL's own), medians over one more round of {runs}:")
    for kind, samples in sorted(took.items()):
        if len(samples) >= runs // 2:  # the hot statements, not a warm-up's one-offs
            print(f"{kind:<26} n={len(samples):<6} {statistics.median(samples):.3f} ms")


def report_statements(took: dict[str, list[tuple[float, float]]], runs: int) -> None:
    print(f"\nstatements' execute, medians over one more round of {runs} runs a side:")
    for kind, samples in took.items():
        wall = statistics.median(w for w, _ in samples) * 1000
        cpu = statistics.median(c for _, c in samples) * 1000
        print(f"{kind:<18} n={len(samples):<6} {wall:.3f} ms wall, {cpu:.3f} ms client CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0)
    parser.add_argument("--statements", action="store_true")
    parser.add_argument("--server-phases", action="store_true")
    parser.add_argument("--redis", default="redis://127.0.0.1:6408/10")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--db", default="bench_node_path")
    parser.add_argument("--history", type=int, default=100_000)
    args = parser.parse_args()

    dags = Path(tempfile.mkdtemp(prefix="beatflow-node-path-")) / "dags"
    dags.mkdir()
    (dags / "bench_speed.py").write_text(
        BENCH_DAGS.replace("MAP_WIDTH", "100").replace("BEAT_DAGS", "1")
    )
    dsn = fresh_database(args.pg, args.db)
    redis.Redis.from_url(args.redis).flushdb()
    settings = Settings.from_env(
        {
            "BEATFLOW_BROKER_URL": args.redis,
            "BEATFLOW_DATABASE_URL": dsn.replace("postgresql://", "postgresql+psycopg://"),
            "BEATFLOW_DAGS_FOLDER": str(dags),
        }
    )
    Store.from_settings(settings).upgrade()
    seed_history(dsn, args.history)
    logging.basicConfig(level=logging.WARNING)  # no per-task lines: the path's own work only
    app = create_app(settings)
    signals.worker_process_init.send(sender=None)  # connect as a pool process does
    task = app.tasks["b_one.only"]

    def node_path(n: int) -> Callable[[], None]:
        run_ids = [
            r.run_id for r in trigger_dags(runtime_of(app), ["b_one"] * n)
        ]  # created, not timed

        def work() -> None:
            for run_id in run_ids:
                result = task.apply(args=[run_id], kwargs={"closes": True})
                if not result.successful():
                    raise SystemExit(f"run {run_id} did not succeed: {result.result!r}")

        return work

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(raw_app.DURABLE_TABLE)

        def pairs() -> None:
            for _ in range(args.runs):
                raw_app.claim_and_finish(conn, uuid.uuid4().hex)

        node_path(50)()  # warm up: connections, prepared statements
        pairs()
        sides = measure_sides(node_path, pairs, conn, args.runs, args.rounds)
        extra_rounds(args, node_path, pairs, conn, runtime_of(app).store._engine)
    for side, got in sides.items():
        cpu, wall, wal = (statistics.median(r[i] for r in got) for i in range(3))
        print(
            f"{side:<10} per run (median of {args.rounds}): {cpu:.3f} ms CPU, {wall:.3f} ms wall, "
            f"{wal:.0f} B of WAL"
        )
    if args.profile:
        work = node_path(args.runs)
        profiler = cProfile.Profile(time.process_time)
        profiler.runcall(work)
        print(f"\nnode path under cProfile (CPU time, {args.runs} runs), by own time:")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


def measure_sides(
    node_path: Callable[[int], Callable[[], None]],
    pairs: Callable[[], None],
    conn: psycopg.Connection[Any],
    runs: int,
    rounds: int,
) -> dict[str, list[tuple[float, float, float]]]:
    """Alternating rounds of each side: (CPU ms, wall ms, WAL bytes) per run, by side."""
    sides: dict[str, list[tuple[float, float, float]]] = {"node path": [], "bare pair": []}
    for rnd in range(rounds):
        sides["node path"].append(per_run(node_path(runs), runs, conn))
        sides["bare pair"].append(per_run(pairs, runs, conn))
        last = (
            f"{k} {v[-1][0]:.3f} ms CPU {v[-1][1]:.3f} ms wall {v[-1][2]:.0f} B of WAL"
            for k, v in sides.items()
        )
        print(f"round {rnd + 1}: " + ", ".join(last), flush=True)
    return sides


def extra_rounds(
    args: argparse.Namespace,
    node_path: Callable[[int], Callable[[], None]],
    pairs: Callable[[], None],
    conn: psycopg.Connection[Any],
    engine: sa.Engine,
) -> None:
    """``--statements`` and ``--server-phases``: one more round of each side apiece."""
    if args.statements:
        work = node_path(args.runs)  # its runs created before the timing
        with timing_statements() as took:
            work()
            pairs()
        report_statements(took, args.runs)
    if args.server_phases:
        work = node_path(args.runs)
        with server_phases(engine, conn) as phases:
            work()
            pairs()
        report_phases(phases, args.runs)


if __name__ == "__main__":
    main()
