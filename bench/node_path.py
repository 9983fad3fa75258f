"""What beatflow's node path costs on its own, next to the floor's two bare statements: one-task
runs executed eagerly in this process (``task.apply``: Celery's tracer, the node wrapper, its
read-and-claim and its finish-and-close; no broker hand-off, no pool), then the same number of
bare autocommit INSERT + UPDATE pairs (bench/raw_app.py's ``claim_and_finish``). A diagnostic
beside bench_throughput.py, not a bench of its own: ``make bench`` does not run it.

    .venv/bin/python bench/node_path.py [--runs 1000] [--rounds 3] [--profile 0]
        [--statements] [--redis redis://127.0.0.1:6408] [--pg postgresql://postgres@127.0.0.1:5432]

Prints, per round, CPU and wall ms per run for each side (medians over the rounds at the end).
``--profile N``: then one more round of the node path under cProfile (CPU time), with the N
functions of most own time. ``--statements``: then one more round of each side with every
statement's ``execute`` timed (wall, and this thread's CPU: the rest is the server's time and
the commit's flush), medians by statement."""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import logging
import pstats
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
from celery import signals

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT / "bench")]

import raw_app  # noqa: E402
from bench_throughput import BENCH_DAGS, fresh_database, seed_history  # noqa: E402

from beatflow.app import create_app  # noqa: E402
from beatflow.runs import trigger_dags  # noqa: E402
from beatflow.settings import Settings  # noqa: E402
from beatflow.store import Store  # noqa: E402


def per_run(work: Callable[[], None], runs: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per run of ``work``."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return (
        (time.process_time() - cpu) * 1000 / runs,
        (time.perf_counter() - wall) * 1000 / runs,
    )


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
        run_ids = [r.run_id for r in trigger_dags(app, ["b_one"] * n)]  # created, not timed

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
        sides: dict[str, list[tuple[float, float]]] = {"node path": [], "bare pair": []}
        for rnd in range(args.rounds):
            sides["node path"].append(per_run(node_path(args.runs), args.runs))
            sides["bare pair"].append(per_run(pairs, args.runs))
            last = (f"{k} {v[-1][0]:.3f} ms CPU {v[-1][1]:.3f} ms wall" for k, v in sides.items())
            print(f"round {rnd + 1}: " + ", ".join(last), flush=True)
        if args.statements:
            work = node_path(args.runs)  # its runs created before the timing
            with timing_statements() as took:
                work()
                pairs()
    for side, got in sides.items():
        cpu = statistics.median(c for c, _ in got)
        wall = statistics.median(w for _, w in got)
        print(f"{side:<10} per run (median of {args.rounds}): {cpu:.3f} ms CPU, {wall:.3f} ms wall")
    if args.statements:
        report_statements(took, args.runs)
    if args.profile:
        work = node_path(args.runs)
        profiler = cProfile.Profile(time.process_time)
        profiler.runcall(work)
        print(f"\nnode path under cProfile (CPU time, {args.runs} runs), by own time:")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
