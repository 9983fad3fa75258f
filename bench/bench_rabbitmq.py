"""DAG-layer speed on RabbitMQ: beatflow against a stock Celery app on the same RabbitMQ node,
side by side in one run, with the same delivery guarantees (acks_late, prefetch 1, JSON, task
events on, publisher confirms; results in Redis on both sides).

    .venv/bin/python bench/bench_rabbitmq.py [--rounds 3] [--amqp amqp://...]
        [--redis redis://127.0.0.1:6408] [--pg postgresql://postgres@127.0.0.1:5432]

Without --amqp it starts a RabbitMQ node of its own on free ports (rabbitmq-server, files in a
temp folder), so other users of the machine's node neither disturb nor see it; without --redis
a redis-server of its own the same way. Both workers:
prefork -c 2 (--concurrency), the same -l; the raw app is bench/raw_app.py in its own worker
(never beatflow's), consuming its own queue ``raw`` on the same node; beatflow's results DB is
PostgreSQL. Rows run interleaved (raw, beatflow, raw, ...; the first side rotates by round) and
print medians with the ratio beatflow / raw; the throughput rows print tasks per second on each
side and raw / beatflow (the issue's bar: within 1.5x). A third side, raw + 2 commits (the
durable floor: ``raw.durable`` of bench/raw_app.py, the same no-op plus a claim and a finish
committed through bare psycopg), runs in the same raw worker and says what durability alone costs
on the node; ``--no-durable`` leaves it out. The throughput rows have a fourth side, the
*recorded floor*: the durable floor plus the one write more that any design recording its runs
makes, the run's own row, inserted and committed by the client before each send (``RunRows``), so
that a one-task run there commits three times, as a one-task DAG run of beatflow's does.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis
from celery import chain

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT), str(ROOT / "bench")]

from bench_throughput import (  # noqa: E402
    BENCH_DAGS,
    DURABLE,
    Bench,
    PgMeter,
    fresh_database,
    timed,
)

from beatflow.app import create_app  # noqa: E402
from beatflow.chaos.rabbitmq_server import ChaosRabbitMQ  # noqa: E402
from beatflow.chaos.servers import ChaosRedis  # noqa: E402
from beatflow.settings import Settings  # noqa: E402
from beatflow.store import Store  # noqa: E402
from tests import procs  # noqa: E402

CHAIN_SAMPLES = 5


@dataclass
class Row:
    label: str
    raw: Callable[[], None]
    beatflow: Callable[[], None]
    durable: Callable[[], None] | None = None  # raw Celery with a durable claim and finish
    task_runs: int = 0  # > 0: a throughput row (tasks per second)
    repeat: int = 1
    raw_times: list[float] = field(default_factory=list)
    bf_times: list[float] = field(default_factory=list)
    durable_times: list[float] = field(default_factory=list)
    recorded: Callable[[], None] | None = None  # the durable floor with a run row per run
    recorded_times: list[float] = field(default_factory=list)


@dataclass
class RunRows:
    """The recorded floor's run rows: one INSERT committed per run, by the sending client, on a
    bare autocommit psycopg connection (the least a trigger that records its run writes)."""

    conn: psycopg.Connection[Any]
    sent: int = 0

    TABLE = (
        "CREATE TABLE IF NOT EXISTS raw_runs (id text PRIMARY KEY, state text NOT NULL, "
        "queued_at timestamptz NOT NULL)"
    )

    def record(self) -> None:
        self.sent += 1
        self.conn.execute(
            "INSERT INTO raw_runs (id, state, queued_at) VALUES (%s, 'queued', now())",
            (f"{os.getpid()}-{self.sent}",),
        )


def recorded_many(b: Bench, runs: RunRows, n: int) -> None:
    """``raw_many(n, DURABLE)`` with each run's row written before its send."""
    task = b.raw.tasks[DURABLE]
    results = []
    for _ in range(n):
        runs.record()
        results.append(task.apply_async())
    for r in results:
        b.raw_wait(r, 600)


def recorded_chains(b: Bench, runs: RunRows, n: int, length: int) -> None:
    """``raw_many_chains(n, length, DURABLE)`` with each chain's run row written before its send."""
    task = b.raw.tasks[DURABLE]
    results = []
    for _ in range(n):
        runs.record()
        results.append(chain(*[task.si() for _ in range(length)]).apply_async())
    for r in results:
        b.raw_wait(r, 600)


def rows(b: Bench, runs: RunRows) -> list[Row]:
    return [
        Row(
            "10-task chain, trigger -> final",
            lambda: b.raw_chain(10),
            lambda: b.bf_one("b_chain10"),
            durable=lambda: b.raw_chain(10, DURABLE),
            repeat=CHAIN_SAMPLES,
        ),
        Row("1 -> 100 -> 1", lambda: b.raw_fan(100), lambda: b.bf_one("b_fan100")),
        Row(
            "200 runs of a 5-task chain at once",
            lambda: b.raw_many_chains(200, 5),
            lambda: b.bf_many("b_chain5", 200),
            durable=lambda: b.raw_many_chains(200, 5, DURABLE),
            recorded=lambda: recorded_chains(b, runs, 200, 5),
            task_runs=1000,
        ),
        Row(
            "500 one-task runs at once",
            lambda: b.raw_many(500),
            lambda: b.bf_many("b_one", 500),
            durable=lambda: b.raw_many(500, DURABLE),
            recorded=lambda: recorded_many(b, runs, 500),
            task_runs=500,
        ),
    ]


def report(done: list[Row]) -> None:
    print("\nRabbitMQ: beatflow vs a stock Celery app on one node (medians; floor = raw + 2c)")
    print(f"{'row':<36} {'raw':>8} {'floor':>8} {'beatflow':>9} {'bf/raw':>7} {'floor/raw':>9} "
          f"{'bf/floor':>8} {'tasks/s raw·floor·bf':>22} {'within 1.5x':>12}")  # fmt: skip
    recorded = [r for r in done if r.recorded_times]
    for r in done:
        raw, bf = statistics.median(r.raw_times), statistics.median(r.bf_times)
        floor = statistics.median(r.durable_times) if r.durable_times else None
        line = f"{r.label:<36} {raw:>7.3f}s "
        line += f"{floor:>7.3f}s " if floor else f"{'':>8} "
        line += f"{bf:>8.3f}s {bf / raw:>6.2f}x "
        line += f"{floor / raw:>8.2f}x {bf / floor:>7.2f}x" if floor else f"{'':>9} {'':>8}"
        if r.task_runs:
            rates = [r.task_runs / t for t in (raw, floor or 0.0, bf) if t]
            ok = "yes" if bf / raw <= 1.5 else "NO"
            line += f" {' · '.join(f'{x:,.0f}' for x in rates):>22} {ok:>12}"
        print(line, flush=True)
    if recorded:
        print("\nthe recorded floor (raw + 2 commits per task run + 1 per run, its run's row):")
        for r in recorded:
            raw, floor = statistics.median(r.raw_times), statistics.median(r.recorded_times)
            bf = statistics.median(r.bf_times)
            print(f"{r.label:<36} {floor:>7.3f}s {floor / raw:>6.2f}x of raw; beatflow "
                  f"{bf / floor:.2f}x of it", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--amqp", default="", help="a RabbitMQ URL (default: a node of our own)")
    parser.add_argument("--redis", default="", help="a Redis URL (default: one of our own)")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--db", default="bench_rabbitmq")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--loglevel", default="info")
    parser.add_argument(
        "--no-durable", action="store_true", help="leave out the raw + 2 commits side"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    tmp = Path(tempfile.mkdtemp(prefix="beatflow-rabbitmq-bench-"))
    node = None if args.amqp else ChaosRabbitMQ(tmp / "rabbitmq")
    own_redis = None if args.redis else ChaosRedis(tmp / "redis")
    try:
        if node is not None:
            node.start()
        if own_redis is not None:
            own_redis.start()
            args.redis = f"redis://127.0.0.1:{own_redis.port}"
        run(args, tmp, args.amqp or (node.url if node else ""))
    finally:
        if node is not None:
            node.kill()
        if own_redis is not None:
            own_redis.stop()


def run(args: argparse.Namespace, tmp: Path, amqp: str) -> None:
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "bench_speed.py").write_text(
        BENCH_DAGS.replace("MAP_WIDTH", "10").replace("BEAT_DAGS", "0")
    )
    dsn = fresh_database(args.pg, args.db)
    durable_dsn = fresh_database(args.pg, f"{args.db}_durable")
    bf_redis, raw_redis = f"{args.redis}/3", f"{args.redis}/4"
    for url in (bf_redis, raw_redis):
        redis.Redis.from_url(url).flushdb()
    env = {
        "BEATFLOW_BROKER_URL": amqp,
        "BEATFLOW_REDIS_URL": bf_redis,
        "BEATFLOW_DATABASE_URL": dsn.replace("postgresql://", "postgresql+psycopg://"),
        "BEATFLOW_DAGS_FOLDER": str(dags),
        "BEATFLOW_LOG_LEVEL": args.loglevel.upper(),
        "BEATFLOW_TASK_SOFT_TIME_LIMIT": "1200",
        "BEATFLOW_TASK_TIME_LIMIT": "1300",
    }
    settings = Settings.from_env(env)
    Store.from_settings(settings).upgrade()
    os.environ["RAW_BROKER_URL"] = amqp
    os.environ["RAW_RESULT_BACKEND"] = raw_redis
    import raw_app

    with psycopg.connect(durable_dsn, autocommit=True) as conn:
        conn.execute(raw_app.DURABLE_TABLE)
        conn.execute(RunRows.TABLE)
    runs = RunRows(psycopg.connect(durable_dsn, autocommit=True))

    app = create_app(settings)
    worker = procs.celery_worker(
        tmp, env, queues=settings.default_queue, concurrency=args.concurrency,
        extra_args=("-l", args.loglevel),
    )  # fmt: skip
    raw_worker = procs.Proc(
        [sys.executable, "-m", "celery", "-A", "raw_app", "worker", "-E", "-P", "prefork",
         "-c", str(args.concurrency), "-Q", "raw", "-n", "raw@%h", "--without-mingle",
         "--without-gossip", "-l", args.loglevel],
        {**os.environ, "PYTHONPATH": str(ROOT / "bench"), "RAW_BROKER_URL": amqp,
         "RAW_RESULT_BACKEND": raw_redis, "RAW_DURABLE_DSN": durable_dsn},
        tmp / "raw-worker.log",
        name="raw",
    )  # fmt: skip
    worker.start()
    raw_worker.start()
    try:
        procs.wait_worker_ready(app, worker)
        procs.wait_worker_ready(raw_app.app, raw_worker)
        b = Bench(app, raw_app.app, PgMeter(dsn, args.db), 10, 0)
        b.raw_chain(10)  # warm up both sides
        b.bf_one("b_chain10")
        print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()}", flush=True)
        print(f"started {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; broker RabbitMQ", flush=True)
        table = rows(b, runs)
        for rnd in range(args.rounds):
            for row in table:
                sides = [(row.raw, row.raw_times), (row.beatflow, row.bf_times)]
                if row.durable is not None and not args.no_durable:
                    sides.insert(1, (row.durable, row.durable_times))
                    if row.recorded is not None:
                        sides.insert(2, (row.recorded, row.recorded_times))
                for sample in range(row.repeat):
                    k = (rnd + sample) % len(sides)
                    for fn, out in sides[k:] + sides[:k]:
                        out.append(timed(fn))
                floor_now = (
                    f" raw+2c {statistics.median(row.durable_times[-row.repeat :]):.3f}s"
                    if row.durable_times
                    else ""
                )
                if row.recorded_times:
                    floor_now += f" recorded {statistics.median(row.recorded_times[-1:]):.3f}s"
                print(
                    f"round {rnd + 1} {row.label}: raw "
                    f"{statistics.median(row.raw_times[-row.repeat :]):.3f}s{floor_now} beatflow "
                    f"{statistics.median(row.bf_times[-row.repeat :]):.3f}s",
                    flush=True,
                )
    finally:
        worker.stop()
        raw_worker.stop()
    report(table)


if __name__ == "__main__":
    main()
