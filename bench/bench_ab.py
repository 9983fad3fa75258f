"""Interleaved A/B of two versions of beatflow's worker, in one run so the machine's drift cancels:
which is faster at a 10-task chain (trigger -> final), a burst of one-task runs and a burst of
5-task chains.

    .venv/bin/python bench/bench_ab.py [--a HEAD] [--b .] [--chains 100] [--bursts 4]
        [--burst 300] [--chain-bursts 4] [--chain-burst 100] [--concurrency-a 2] [--concurrency-b 2]
        [--redis redis://127.0.0.1:6408] [--pg postgresql://postgres@127.0.0.1:5432]

``--a``/``--b``: a git revision (checked out into a worktree of its own for the run), or ``.``
for this checkout as it is (uncommitted changes included). The defaults compare the last commit
with the working tree, and with nothing changed the run is an A/A: how far apart two identical
sides come out here (it calibrates the rest). ``--concurrency-a``/``-b`` (prefork ``-c``, 2 by
default) compare sizes instead: the same code at ``-c 2`` and ``-c 4``, say.

Worker A runs A's code on queue ``bench_ab_a`` and worker B runs B's on ``bench_ab_b``
(``-l info``), both against one results DB and one Redis. The DAGs are the same twice, one copy
per queue. Chains alternate one by one and bursts burst by burst, each side going first in turn;
the client (trigger, follow) is this checkout's code. Both versions need the same migrations.
The whole-row benchmarks against raw Celery are bench_throughput.py; this one only tells two
versions of beatflow apart.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]

from bench_throughput import PgMeter, fresh_database, wait_all_final  # noqa: E402

from beatflow.app import create_app  # noqa: E402
from beatflow.runs import follow_run, trigger_dag  # noqa: E402
from beatflow.runtime import runtime_of  # noqa: E402
from beatflow.settings import Settings  # noqa: E402
from beatflow.store import Store  # noqa: E402
from tests import procs  # noqa: E402

SIDES = ("a", "b")
MIGRATIONS = Path("platform/beatflow/store/migrations/versions")
DAGS = """
from beatflow import DAG, task


@task
def noop(*_: object) -> None:
    return None


for side in ("a", "b"):
    queue = f"bench_ab_{side}"
    with DAG(f"ab_chain_{side}", max_active_runs=100_000):
        prev = noop.override(task_id="t0", queue=queue)()
        for i in range(1, 10):
            prev = noop.override(task_id=f"t{i}", queue=queue)(prev)
    with DAG(f"ab_chain5_{side}", max_active_runs=100_000):
        prev = noop.override(task_id="t0", queue=queue)()
        for i in range(1, 5):
            prev = noop.override(task_id=f"t{i}", queue=queue)(prev)
    with DAG(f"ab_one_{side}", max_active_runs=100_000):
        noop.override(task_id="only", queue=queue)()
"""


@contextlib.contextmanager
def checkout(ref: str, where: Path) -> Iterator[Path]:
    """The source tree of ``ref``: this checkout for ``.``, else a detached worktree."""
    if ref == ".":
        yield ROOT
        return
    git = ["git", "-C", str(ROOT)]
    subprocess.run([*git, "worktree", "add", "--detach", "--quiet", str(where), ref], check=True)
    try:
        yield where
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(where)], check=False)


def migrations(tree: Path) -> set[str]:
    return {p.name for p in (tree / MIGRATIONS).glob("*.py")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a", default="HEAD", help="a git revision, or . (this checkout)")
    parser.add_argument("--b", default=".", help="a git revision, or . (this checkout)")
    parser.add_argument("--chains", type=int, default=100, help="10-task chains per side")
    parser.add_argument("--bursts", type=int, default=4, help="bursts of one-task runs per side")
    parser.add_argument("--burst", type=int, default=300, help="one-task runs per burst")
    parser.add_argument(
        "--chain-bursts", type=int, default=4, help="bursts of 5-task chains per side"
    )
    parser.add_argument("--chain-burst", type=int, default=100, help="5-task chains per burst")
    parser.add_argument("--concurrency-a", type=int, default=2, help="worker A's prefork -c")
    parser.add_argument("--concurrency-b", type=int, default=2, help="worker B's prefork -c")
    parser.add_argument("--redis", default="redis://127.0.0.1:6408")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--db", default="bench_ab")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="beatflow-ab-"))
    (tmp / "dags").mkdir()
    (tmp / "dags" / "ab.py").write_text(DAGS)
    dsn = fresh_database(args.pg, args.db)
    broker = f"{args.redis}/3"
    redis.Redis.from_url(broker).flushdb()
    env = {
        "BEATFLOW_BROKER_URL": broker,
        "BEATFLOW_DATABASE_URL": dsn.replace("postgresql://", "postgresql+psycopg://"),
        "BEATFLOW_DAGS_FOLDER": str(tmp / "dags"),
        "BEATFLOW_LOG_LEVEL": "INFO",
    }
    with checkout(args.a, tmp / "a") as tree_a, checkout(args.b, tmp / "b") as tree_b:
        trees = {"a": tree_a, "b": tree_b}
        if not migrations(tree_a) == migrations(tree_b) == migrations(ROOT):
            sys.exit("bench_ab: A, B and this checkout must have the same migrations")
        settings = Settings.from_env(env)
        Store.from_settings(settings).upgrade()
        app = create_app(settings)
        workers = {
            side: procs.celery_worker(  # prefork -c 2, -l info, -E
                tmp,
                {**env, "PYTHONPATH": str(trees[side] / "platform")},
                queues=f"bench_ab_{side}",
                concurrency=getattr(args, f"concurrency_{side}"),
                name=f"ab_{side}",
            )
            for side in SIDES
        }
        try:
            for w in workers.values():
                w.start()
            for w in workers.values():
                procs.wait_worker_ready(app, w)
            run(app, PgMeter(dsn, args.db), args, trees)
        finally:
            for w in workers.values():
                w.stop()


def run(app: object, meter: PgMeter, args: argparse.Namespace, trees: dict[str, Path]) -> None:
    print(
        f"A = {args.a} ({trees['a']}, -c {args.concurrency_a}), "
        f"B = {args.b} ({trees['b']}, -c {args.concurrency_b})",
        flush=True,
    )
    for side in SIDES:  # warm up: connections, prepared statements
        for _ in range(5):
            follow_run(
                runtime_of(app),
                f"ab_chain_{side}",
                trigger_dag(runtime_of(app), f"ab_chain_{side}").run_id,
            )
    chains: dict[str, list[float]] = {side: [] for side in SIDES}
    for i in range(args.chains):
        for side in SIDES if i % 2 == 0 else SIDES[::-1]:
            dag_id = f"ab_chain_{side}"
            started = time.perf_counter()
            follow_run(
                runtime_of(app), dag_id, trigger_dag(runtime_of(app), dag_id).run_id, timeout=120
            )
            chains[side].append(time.perf_counter() - started)
    bursts = burst_times(app, meter, "ab_one", args.bursts, args.burst)
    chain_bursts = burst_times(app, meter, "ab_chain5", args.chain_bursts, args.chain_burst)
    a, b = statistics.median(chains["a"]), statistics.median(chains["b"])
    print(f"10-task chain, median of {args.chains}: A {a * 1000:.2f} ms, B {b * 1000:.2f} ms, "
          f"B/A {b / a:.3f}")  # fmt: skip
    report_bursts(f"{args.burst} one-task runs", bursts)
    if args.chain_bursts:
        report_bursts(f"{args.chain_burst} 5-task chains at once", chain_bursts)


def burst_times(
    app: object, meter: PgMeter, dag_prefix: str, count: int, size: int
) -> dict[str, list[float]]:
    """Seconds from the first trigger to the last run final, for ``count`` bursts of ``size``
    runs of ``<dag_prefix>_<side>`` a side, the sides in turns, each going first in turn."""
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for i in range(count):
        for side in SIDES if i % 2 == 0 else SIDES[::-1]:
            dag_id = f"{dag_prefix}_{side}"
            started = time.perf_counter()
            runs = [(dag_id, trigger_dag(runtime_of(app), dag_id).run_id) for _ in range(size)]
            wait_all_final(meter, runs)
            times[side].append(time.perf_counter() - started)
    return times


def report_bursts(what: str, times: dict[str, list[float]]) -> None:
    a, b = statistics.median(times["a"]), statistics.median(times["b"])
    each = ", ".join(f"{s.upper()} " + " ".join(f"{t:.2f}" for t in times[s]) for s in SIDES)
    print(f"{what}, median of {len(times['a'])}: A {a:.3f} s, B {b:.3f} s, B/A {b / a:.3f} "
          f"({each})")  # fmt: skip


if __name__ == "__main__":
    main()
