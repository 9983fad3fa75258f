"""DAG-layer speed: beatflow against a stock Celery app (its own worker, task events on, Redis
result backend), side by side in one run; many runs at once, fan-outs, a wide .map(), and what
the results DB pays per task run (PostgreSQL's own counters) next to a bare insert + update.

    .venv/bin/python bench/bench_throughput.py [--rounds 3] [--redis redis://127.0.0.1:6408]
        [--pg postgresql://postgres@127.0.0.1:5432] [--db bench_speed] [--map-width 10000]

Both workers: prefork -c 2 (--concurrency), acks_late, prefetch 1, -E, the same -l
(--loglevel, info by default). The raw app is bench/raw_app.py (no beatflow code); beatflow's
results DB is PostgreSQL with dedupe keys. Rows run interleaved (raw, beatflow, raw, ...; the
first side rotates by round and sample); medians are printed with the ratio beatflow / raw. The
10-task chain takes 10 samples a side in each round (in turns), the other rows one. The DB counters
are read in round 1 around each bulk row, after waiting for every backend to flush its
statistics (PostgreSQL flushes an idle backend's within ~10 s).

A third side, "raw + 2 commits", runs the chain, the bulk rows and the map on the same stock app
with ``raw.durable`` (bench/raw_app.py): the no-op plus a claim INSERT and a finish UPDATE committed
one by one with bare psycopg (its own database, so beatflow's counters stay its own). It is the
least an exactly-once scheme pays on this machine; beatflow / that side is beatflow's own
overhead above durability (``--no-durable`` leaves it out). The CPU table (round 1, per task
run) splits each side by process (client, consumer, pool, Redis, PostgreSQL backends), this
side's too, so what beatflow spends above durability shows process by process.

Last come how long a worker slot holds a task on each side (Celery's own "succeeded in" lines,
medians over the whole run) and where a beatflow chain's time goes: the trigger call, the first
hop, each hop's claim -> finish and finish -> next claim, and the follower's wake after the run
ended.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT), str(ROOT / "bench")]

from celery import chain, chord, group  # noqa: E402
from celery.exceptions import TimeoutError as CeleryTimeout  # noqa: E402
from celery.result import GroupResult  # noqa: E402
from celery.states import READY_STATES  # noqa: E402

from beatflow.app import create_app  # noqa: E402
from beatflow.runs import make_run_id, trigger_and_follow, trigger_dag, trigger_dags  # noqa: E402
from beatflow.runs.fire import create_scheduled_runs, scheduled_draft  # noqa: E402
from beatflow.runtime import runtime_of  # noqa: E402
from beatflow.settings import Settings  # noqa: E402
from beatflow.store import Store  # noqa: E402
from beatflow.store.records import INSERT_CHUNK  # noqa: E402
from tests import procs  # noqa: E402

FINAL = ("success", "failed", "cancelled")
STAT_FLUSH_WAIT = 11.0  # PostgreSQL 15 flushes an idle backend's statistics after 10 s
CHAIN_SAMPLES = 10  # one chain is ~50 ms: a single sample per round is mostly noise
DURABLE = "raw.durable"  # raw_app's no-op with a durable claim and finish
MISSED_CHECK_S = 10.0  # how often a raw wait looks for results stored but not announced
SAMPLE_TRIES = 3  # a raw sample whose result notification was missed is taken again

BENCH_DAGS = """
from beatflow import DAG, task


@task
def noop(*_: object) -> None:
    return None


@task
def items(n: int) -> list[int]:
    return list(range(n))


with DAG("b_chain10"):
    prev = noop.override(task_id="t0")()
    for i in range(1, 10):
        prev = noop.override(task_id=f"t{i}")(prev)

with DAG("b_chain5", max_active_runs=100_000):
    prev = noop.override(task_id="t0")()
    for i in range(1, 5):
        prev = noop.override(task_id=f"t{i}")(prev)

with DAG("b_one", max_active_runs=100_000):
    noop.override(task_id="only")()

for width in (100, 1000):
    with DAG(f"b_fan{width}"):
        src = noop.override(task_id="src")()
        mids = [noop.override(task_id=f"m{i}")() for i in range(width)]
        for m in mids:
            src >> m
        noop.override(task_id="sink")() << mids

with DAG("b_map"):
    noop.override(task_id="each").map(items(MAP_WIDTH))

for i in range(BEAT_DAGS):
    with DAG(f"b_beat_{i:04d}", max_active_runs=100_000):
        noop.override(task_id="only")()
"""


# ----------------------------------------------------------------------------- PostgreSQL meter

COUNTERS = ("xact_commit", "tup_fetched", "tup_returned", "tup_inserted", "tup_updated")


def backend_cpu_ticks(pids: Iterable[int]) -> dict[int, int]:
    """utime + stime (clock ticks) of each process, from /proc/<pid>/stat."""
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = int(fields[11]) + int(fields[12])
    return out


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (a prefork worker's pool processes)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@dataclass
class CpuMeter:
    """CPU seconds of one side's processes around a row: the client (this process), the
    worker's consumer (its main process), its pool processes and the Redis server; with
    ``backends``, also the PostgreSQL backends it lists (the raw + 2 commits side's, whose
    database is not metered by ``PgMeter``)."""

    worker_pid: int
    redis_pid: int
    backends: Callable[[], list[int]] | None = None

    def ticks(self) -> dict[str, int]:
        own = os.times()
        hz = os.sysconf("SC_CLK_TCK")
        pool = children(self.worker_pid)
        got = backend_cpu_ticks([self.worker_pid, self.redis_pid, *pool])
        ticks = {
            "client": round((own.user + own.system) * hz),
            "consumer": got.get(self.worker_pid, 0),
            "pool": sum(got.get(p, 0) for p in pool),
            "redis": got.get(self.redis_pid, 0),
        }
        if self.backends is not None:
            ticks["PG"] = sum(backend_cpu_ticks(self.backends()).values())
        return ticks

    def measure(self, work: Callable[[], None]) -> dict[str, float]:
        before = self.ticks()
        work()
        after = self.ticks()
        return {k: (after[k] - before[k]) / os.sysconf("SC_CLK_TCK") for k in before}


@dataclass
class PgSnapshot:
    counters: dict[str, int]
    cpu: dict[int, int]


@dataclass
class PgMeter:
    """pg_stat_database counters and backend CPU of one database, read from a connection of its
    own; ``statements`` counts this connection's own statements so they can be taken out."""

    dsn: str
    db: str
    conn: psycopg.Connection[Any] = field(init=False)
    statements: int = 0

    def __post_init__(self) -> None:
        self.conn = psycopg.connect(self.dsn, autocommit=True)

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        self.statements += 1
        row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def backends(self) -> list[int]:
        """The pids of the other backends connected to this database."""
        self.statements += 1
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.db,),
            )
        ]

    def snapshot(self) -> PgSnapshot:
        self.conn.execute("SELECT pg_stat_force_next_flush()")
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        row = self.conn.execute(
            f"SELECT {', '.join(COUNTERS)} FROM pg_stat_database WHERE datname = %s", (self.db,)
        ).fetchone()
        assert row is not None
        pids = self.backends()
        self.statements += 3
        return PgSnapshot(dict(zip(COUNTERS, row, strict=True)), backend_cpu_ticks(pids))

    def measure(self, work: Callable[[], None]) -> dict[str, float]:
        """Counters and backend CPU seconds spent by ``work`` (minus this meter's statements)."""
        time.sleep(STAT_FLUSH_WAIT)
        before = self.snapshot()
        own = self.statements
        work()
        own = self.statements - own
        time.sleep(STAT_FLUSH_WAIT)
        after = self.snapshot()
        own += 4  # the closing snapshot's statements before its counters were read
        delta = {k: float(after.counters[k] - before.counters[k]) for k in COUNTERS}
        # each of our statements is one transaction that fetches at most one row
        delta["xact_commit"] -= own
        delta["tup_fetched"] = max(0.0, delta["tup_fetched"] - own)
        ticks = sum(t - before.cpu.get(pid, 0) for pid, t in after.cpu.items())
        delta["cpu_s"] = ticks / os.sysconf("SC_CLK_TCK")
        return delta


def seed_history(dsn: str, rows: int) -> None:
    """A results DB with history, analysed, like any deployment's (a fresh, never-analysed
    table makes the planner pick sequential scans that no real database would)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO task_runs (dedupe_key, dag_id, run_id, task_id, map_index, state, "
            "try_number) SELECT 'history/r' || (i / 10) || '/t' || (i %% 10), 'history', "
            "'r' || (i / 10), 't' || (i %% 10), -1, 'success', 1 FROM generate_series(1, %s) i",
            (rows,),
        )
        # and the DAG runs those task runs belong to: without them the planner, which last
        # saw dag_runs empty, reads every run lookup as a sequential scan of dag_runs
        conn.execute(
            "INSERT INTO dag_runs (dag_id, run_id, logical_date, trigger, conf, state, "
            "queued_at, started_at, ended_at) SELECT 'history', 'r' || i, "
            "now() - i * interval '1 minute', 'manual', '{}', 'success', "
            "now() - i * interval '1 minute', now() - i * interval '1 minute', "
            "now() - i * interval '1 minute' FROM generate_series(0, %s) i",
            (rows // 10,),
        )
        conn.execute("ANALYZE task_runs")
        conn.execute("ANALYZE dag_runs")


def floor_cost(meter: PgMeter, n: int) -> dict[str, float]:
    """A bare insert + update per task run with psycopg (autocommit: two transactions)."""
    with psycopg.connect(meter.dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS floor_runs (id bigserial PRIMARY KEY, "
            "key text UNIQUE NOT NULL, state text NOT NULL)"
        )
        conn.execute("TRUNCATE floor_runs")

        def work() -> None:
            for i in range(n):
                conn.execute(
                    "INSERT INTO floor_runs (key, state) VALUES (%s, 'running')", (f"k{i}",)
                )
                conn.execute("UPDATE floor_runs SET state = 'success' WHERE key = %s", (f"k{i}",))

        return meter.measure(work)


# ----------------------------------------------------------------------------- the two sides


def fresh_database(pg: str, db: str) -> str:
    """Database ``db`` on the server ``pg``, dropped and created empty; its DSN."""
    with psycopg.connect(f"{pg}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{db}"')
    return f"{pg}/{db}"


def wait_all_final(meter: PgMeter, runs: list[tuple[str, str]], timeout: float = 1800) -> None:
    """Wait until every (dag_id, run_id) is final, reading one run's state per poll (the oldest
    still open), so the wait costs the DB about one indexed row per run plus one per poll."""
    deadline = time.monotonic() + timeout
    i = 0
    while i < len(runs):
        state = meter.one("SELECT state FROM dag_runs WHERE dag_id = %s AND run_id = %s", runs[i])
        if state in FINAL:
            i += 1
            continue
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(runs) - i} DAG runs still open after {timeout}s")
        time.sleep(0.02)


@dataclass
class Bench:
    app: Any  # beatflow's app (this process only triggers and watches)
    raw: Any  # the stock app (its worker is another process)
    meter: PgMeter
    map_width: int
    beat_dags: int
    tick: datetime = field(default_factory=lambda: datetime(2030, 1, 1, tzinfo=UTC))

    missed: int = 0  # results raw Celery's backend stored but never announced (see raw_wait)
    # run id -> (wall clock before the trigger, after the follower woke), for chain_hops
    followed: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)

    # raw Celery ---------------------------------------------------------------
    def raw_wait(self, result: Any, timeout: float) -> None:
        """``wait_raw``, counting in ``missed`` the results whose notification never came."""
        self.missed += wait_raw(result, timeout)

    def raw_chain(self, n: int, task: str = "raw.noop") -> None:
        noop = self.raw.tasks[task]
        self.raw_wait(chain(*[noop.si() for _ in range(n)]).apply_async(), 120)

    def raw_fan(self, width: int) -> None:
        noop = self.raw.tasks["raw.noop"]
        fan = chain(noop.si(), chord([noop.si() for _ in range(width)], noop.si()))
        self.raw_wait(fan.apply_async(), 1200)

    def raw_many_chains(self, runs: int, length: int, task: str = "raw.noop") -> None:
        noop = self.raw.tasks[task]
        results = [chain(*[noop.si() for _ in range(length)]).apply_async() for _ in range(runs)]
        for r in results:
            self.raw_wait(r, 600)

    def raw_send(self, n: int, task: str = "raw.noop") -> list[Any]:
        noop = self.raw.tasks[task]
        return [noop.apply_async() for _ in range(n)]

    def raw_many(self, n: int, task: str = "raw.noop") -> None:
        for r in self.raw_send(n, task):
            self.raw_wait(r, 600)

    def raw_group(self, n: int, task: str = "raw.noop") -> None:
        noop = self.raw.tasks[task]
        self.raw_wait(group([noop.si(i) for i in range(n)]).apply_async(), 1800)

    # beatflow -----------------------------------------------------------------
    def bf_one(self, dag_id: str) -> None:
        # subscribed before the trigger, as Celery's result.get() is before its send; woken by
        # the close
        before = datetime.now(UTC)
        final = trigger_and_follow(runtime_of(self.app), dag_id, timeout=1800)
        self.followed[final.run_id] = (before, datetime.now(UTC))
        assert final.state == "success", final

    def bf_trigger(self, dag_id: str, n: int) -> list[tuple[str, str]]:
        return [(dag_id, trigger_dag(runtime_of(self.app), dag_id).run_id) for _ in range(n)]

    def bf_many(self, dag_id: str, n: int) -> None:
        wait_all_final(self.meter, self.bf_trigger(dag_id, n))

    def bf_batch(self, dag_id: str, n: int) -> None:
        """``n`` runs in one ``trigger_dags`` call (Celery's own many-at-once is a group)."""
        runs = trigger_dags(runtime_of(self.app), [dag_id] * n)
        wait_all_final(self.meter, [(dag_id, r.run_id) for r in runs])

    def bf_beat(self) -> None:
        """What the beat does when ``beat_dags`` DAGs are due on the same minute: it creates
        their runs (fenced, ``INSERT_CHUNK`` per statement, before any watermark moves:
        scheduler.creation), then sends batches of 50 fires (``beatflow.fire_schedules``);
        then every run to its end."""
        self.tick += timedelta(minutes=1)
        fires = [
            [f"b_beat_{i:04d}", self.tick.isoformat(), "scheduled"] for i in range(self.beat_dags)
        ]
        runtime = runtime_of(self.app)
        drafts = [scheduled_draft(runtime.dag(d), self.tick, how) for d, _, how in fires]
        for i in range(0, len(drafts), INSERT_CHUNK):
            create_scheduled_runs(runtime.store, drafts[i : i + INSERT_CHUNK], 1)
        for i in range(0, len(fires), 50):
            self.app.send_task(
                "beatflow.fire_schedules", args=[fires[i : i + 50], 1], ignore_result=True
            )
        run_id = make_run_id("scheduled", self.tick)
        wait_all_final(self.meter, [(f, run_id) for f, _, _ in fires])


@dataclass
class Row:
    label: str
    raw: Callable[[], None]
    beatflow: Callable[[], None]
    task_runs: int = 0  # > 0: a bulk row, measured with the DB counters
    dag_runs: int = 0
    repeat: int = 1  # samples per side per round (raw, beatflow, raw, ... in turn)
    durable: Callable[[], None] | None = None  # raw Celery with a durable claim and finish
    raw_times: list[float] = field(default_factory=list)
    bf_times: list[float] = field(default_factory=list)
    durable_times: list[float] = field(default_factory=list)
    db: dict[str, float] | None = None
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)  # side -> process -> s


def timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def make_rows(
    b: Bench, map_width: int
) -> tuple[list[Row], list[list[Any]], list[list[tuple[str, str]]]]:
    """The rows, and the lists the send-only row leaves work in (drained after it)."""
    drained: list[list[Any]] = []

    def raw_send_500() -> None:
        drained.append(b.raw_send(500))

    pending: list[list[tuple[str, str]]] = []

    def bf_trigger_500() -> None:
        pending.append(b.bf_trigger("b_one", 500))

    return (
        [
            Row(
                "10-task chain, trigger -> final",
                lambda: b.raw_chain(10),
                lambda: b.bf_one("b_chain10"),
                repeat=CHAIN_SAMPLES,
                durable=lambda: b.raw_chain(10, DURABLE),
            ),
            Row("1 -> 100 -> 1", lambda: b.raw_fan(100), lambda: b.bf_one("b_fan100")),
            Row("1 -> 1,000 -> 1", lambda: b.raw_fan(1000), lambda: b.bf_one("b_fan1000")),
            Row(
                "200 runs of a 5-task chain at once",
                lambda: b.raw_many_chains(200, 5),
                lambda: b.bf_many("b_chain5", 200),
                task_runs=1000,
                dag_runs=200,
                durable=lambda: b.raw_many_chains(200, 5, DURABLE),
            ),
            Row(
                "500 one-task runs at once",
                lambda: b.raw_many(500),
                lambda: b.bf_many("b_one", 500),
                task_runs=500,
                dag_runs=500,
                durable=lambda: b.raw_many(500, DURABLE),
            ),
            Row("triggering alone (500 sends)", raw_send_500, bf_trigger_500),
            Row(
                f"beat fires {b.beat_dags:,} DAGs on one minute",
                lambda: b.raw_many(b.beat_dags),
                b.bf_beat,
                task_runs=b.beat_dags,
                dag_runs=b.beat_dags,
                durable=lambda: b.raw_many(b.beat_dags, DURABLE),
            ),
            Row(
                f"{map_width:,}-wide .map() vs raw group",
                lambda: b.raw_group(map_width),
                lambda: b.bf_one("b_map"),
                task_runs=map_width + 2,
                dag_runs=1,
                durable=lambda: b.raw_group(map_width, DURABLE),
            ),
            Row(  # last, so that --only keeps the numbers of the rows before it
                "500 one-task runs in one call (group)",
                lambda: b.raw_group(500),
                lambda: b.bf_batch("b_one", 500),
                task_runs=500,
                dag_runs=500,
                durable=lambda: b.raw_group(500, DURABLE),
            ),
        ],
        drained,
        pending,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis", default="redis://127.0.0.1:6408")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--db", default="bench_speed")
    parser.add_argument("--map-width", type=int, default=10_000)
    parser.add_argument("--beat-dags", type=int, default=1000)
    parser.add_argument("--only", default="", help="comma-separated row numbers (1-based)")
    parser.add_argument("--no-counters", action="store_true")
    parser.add_argument(
        "--no-durable", action="store_true", help="leave out the raw + 2 commits side"
    )
    parser.add_argument(
        "--concurrency", type=int, default=2, help="both workers' prefork -c (2 by default)"
    )
    parser.add_argument(
        "--loglevel",
        default="info",
        help="both workers' -l (info: as beatflow's compose file and chart run workers)",
    )
    parser.add_argument(
        "--history", type=int, default=100_000, help="old task runs to start from (then ANALYZE)"
    )
    args = parser.parse_args()
    # SIGTERM (timeout, kill) unwinds like Ctrl-C, so the finally below stops both workers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    tmp = Path(tempfile.mkdtemp(prefix="beatflow-speed-"))
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "bench_speed.py").write_text(
        BENCH_DAGS.replace("MAP_WIDTH", str(args.map_width)).replace(
            "BEAT_DAGS", str(args.beat_dags)
        )
    )
    dsn = fresh_database(args.pg, args.db)
    durable_dsn = fresh_database(args.pg, f"{args.db}_durable")
    bf_redis, raw_redis = f"{args.redis}/1", f"{args.redis}/2"
    for url in (bf_redis, raw_redis):
        redis.Redis.from_url(url).flushdb()
    env = {
        "BEATFLOW_BROKER_URL": bf_redis,
        "BEATFLOW_DATABASE_URL": dsn.replace("postgresql://", "postgresql+psycopg://")
        + os.environ.get("BENCH_DB_QUERY", ""),
        "BEATFLOW_DAGS_FOLDER": str(dags),
        # beatflow's worker takes its level from here (its setup_logging hook, not -l): the
        # same level as the raw worker's -l, or beatflow would skip the per-task lines raw pays
        "BEATFLOW_LOG_LEVEL": args.loglevel.upper(),
        "BEATFLOW_TASK_SOFT_TIME_LIMIT": "1200",
        "BEATFLOW_TASK_TIME_LIMIT": "1300",
    }
    settings = Settings.from_env(env)
    Store.from_settings(settings).upgrade()
    seed_history(dsn, args.history)
    os.environ["RAW_BROKER_URL"] = raw_redis
    import raw_app

    with psycopg.connect(durable_dsn, autocommit=True) as conn:
        conn.execute(raw_app.DURABLE_TABLE)

    app = create_app(settings)
    worker = procs.celery_worker(
        tmp,
        env,
        queues=settings.default_queue,
        concurrency=args.concurrency,
        extra_args=("-l", args.loglevel),
    )
    raw_worker = procs.Proc(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "raw_app",
            "worker",
            "-E",
            "-P",
            "prefork",
            "-c",
            str(args.concurrency),
            "-Q",
            "raw",
            "-n",
            "raw@%h",
            "--without-mingle",
            "--without-gossip",
            "-l",
            args.loglevel,
        ],
        {
            **os.environ,
            "PYTHONPATH": str(ROOT / "bench"),
            "RAW_BROKER_URL": raw_redis,
            "RAW_DURABLE_DSN": durable_dsn,
        },
        tmp / "raw-worker.log",
        name="raw",
    )
    worker.start()
    raw_worker.start()
    meter = PgMeter(dsn, args.db)
    redis_pid = int(redis.Redis.from_url(bf_redis).info("server")["process_id"])
    durable_meter = PgMeter(durable_dsn, f"{args.db}_durable")
    cpus = {
        "bf": CpuMeter(worker.pid, redis_pid),
        "raw": CpuMeter(raw_worker.pid, redis_pid),
        "durable": CpuMeter(raw_worker.pid, redis_pid, durable_meter.backends),
    }
    try:
        procs.wait_worker_ready(app, worker)
        procs.wait_worker_ready(raw_app.app, raw_worker)
        b = Bench(app, raw_app.app, meter, args.map_width, args.beat_dags)
        rows, drained, pending = make_rows(b, args.map_width)
        only = {int(x) for x in args.only.split(",") if x}
        rows = [r for i, r in enumerate(rows, 1) if not only or i in only]
        if args.no_durable:
            for r in rows:
                r.durable = None
        b.raw_chain(10)  # warm up every side
        b.raw_chain(10, DURABLE)
        b.bf_one("b_chain10")
        print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()}", flush=True)
        print(f"started {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", flush=True)
        for rnd in range(args.rounds):
            for row in rows:
                sides = [("raw", row.raw, row.raw_times), ("bf", row.beatflow, row.bf_times)]
                if row.durable is not None:
                    sides.insert(1, ("durable", row.durable, row.durable_times))
                for sample in range(row.repeat):
                    k = (rnd + sample) % len(sides)  # each side goes first in turn
                    turn = sides[k:] + sides[:k]
                    for name, fn, out in turn:
                        metered_now = row.task_runs and rnd == 0 and not args.no_counters
                        sample_now = Sample(row, name, fn, bool(metered_now))
                        out.append(take(b, sample_now, cpus, meter, drained, pending))
                raw_now = statistics.median(row.raw_times[-row.repeat :])
                bf_now = statistics.median(row.bf_times[-row.repeat :])
                each = f" (median of {row.repeat})" if row.repeat > 1 else ""
                durable_now = (
                    f" raw+2c {statistics.median(row.durable_times[-row.repeat :]):.3f}s"
                    if row.durable_times
                    else ""
                )
                print(
                    f"round {rnd + 1} {row.label}: raw {raw_now:.3f}s{durable_now} "
                    f"beatflow {bf_now:.3f}s" + each,
                    flush=True,
                )
        floor = None if args.no_counters else floor_cost(meter, 1000)
    finally:
        worker.stop()
        raw_worker.stop()
    report(rows, floor)
    report_cpu(rows)
    print(slot_times(raw_worker.log_path, worker.log_path))
    if not only or 1 in only:
        print(chain_hops(dsn, b.followed))
    for kind, seconds in plan_seconds().items():
        print(f"plan a 10,000-task non-series-parallel DAG ({kind}): {seconds * 1000:,.0f} ms")


@dataclass(frozen=True)
class Sample:
    row: Row
    side: str
    fn: Callable[[], None]
    metered: bool  # with its processes' CPU and (beatflow) the DB's counters


def take(
    b: Bench,
    sample: Sample,
    cpus: dict[str, CpuMeter],
    meter: PgMeter,
    drained: list[list[Any]],
    pending: list[list[tuple[str, str]]],
) -> float:
    """One sample's wall time, taken again when raw Celery's backend missed a notification
    during it (``wait_raw``): that time would be the watch's, not the work's."""
    row, side = sample.row, sample.side
    for _ in range(SAMPLE_TRIES):
        missed = b.missed
        if sample.metered:
            took = metered(row, side, sample.fn, cpus[side], meter)
        else:
            took = timed(sample.fn)
        settle(meter, drained, pending)
        if b.missed == missed:
            return took
        print(
            f"  {row.label}, {side}: Celery's result backend missed a result's notification "
            f"({took:.1f}s): sample taken again",
            flush=True,
        )
    raise SystemExit(f"{row.label}, {side}: {SAMPLE_TRIES} samples, each with a missed result")


def wait_raw(result: Any, timeout: float) -> bool:
    """``result.get()``, the way a raw Celery user waits, with a watch on a known fault of
    Celery's Redis result backend: a ``get()`` can wait forever for results that were stored,
    their notification missed (celery/celery#4470; seen here in the 200 x 5-chain row, the raw
    worker idle for the ten minutes of the get's timeout). Every ``MISSED_CHECK_S`` the stored
    results are read directly; when all are there the wait ends and returns True (the sample's
    time is then the watch's, so the caller repeats it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result.get(timeout=min(MISSED_CHECK_S, max(deadline - time.monotonic(), 0.1)))
            return False
        except CeleryTimeout:
            if _stored(result):
                return True
            if time.monotonic() >= deadline:
                raise


def _stored(result: Any) -> bool:
    """Whether the backend holds every result of ``result`` (a group's: each of its own), read
    with a plain GET, not through the notifications a ``get()`` waits on."""
    if isinstance(result, GroupResult):
        return all(_stored(child) for child in result.results)
    meta = result.backend.get_task_meta(result.id, cache=False)
    return bool(meta["status"] in READY_STATES)


def settle(meter: PgMeter, drained: list[list[Any]], pending: list[list[tuple[str, str]]]) -> None:
    """After the send-only rows: let each side's worker finish what was only sent."""
    for results in drained:
        for r in results:
            wait_raw(r, 600)
    drained.clear()
    for runs in pending:
        wait_all_final(meter, runs)
    pending.clear()


def metered(row: Row, side: str, fn: Callable[[], None], cpu: CpuMeter, meter: PgMeter) -> float:
    """Run one side of a bulk row with its processes' CPU measured (and, for beatflow, the
    results DB's counters; the raw + 2 commits side's backends are in its ``CpuMeter``);
    returns the wall time."""
    spent: list[float] = []

    def run() -> None:
        row.cpu[side] = cpu.measure(lambda: spent.append(timed(fn)))

    if side == "bf":
        row.db = meter.measure(run)
        row.cpu[side]["PG"] = row.db["cpu_s"]
    else:
        run()
    return spent[0]


def chain_hops(dsn: str, followed: dict[str, tuple[datetime, datetime]], runs: int = 30) -> str:
    """Where a beatflow chain's time goes, from the task runs' own timestamps (medians over the
    last ``runs`` 10-task chains): ``started_at`` is stamped just before a task's read-and-claim,
    ``ended_at`` just before its finish; ``followed`` has each run's wall clock before its
    trigger call and after its follower woke (the bench's own, same host clock). The run's end
    is not a part of its own: the closing task's finish stamps it with the task's ``ended_at``."""
    parts: dict[str, list[float]] = {
        k: [] for k in ("trigger", "first", "inside", "between", "woken", "whole")
    }
    with psycopg.connect(dsn) as conn:
        done = conn.execute(
            "SELECT run_id, queued_at, ended_at FROM dag_runs WHERE dag_id = 'b_chain10' "
            "AND state = 'success' ORDER BY queued_at DESC LIMIT %s",
            (runs,),
        ).fetchall()
        for run_id, queued_at, ended_at in done:
            tasks = conn.execute(
                "SELECT started_at, ended_at FROM task_runs WHERE dag_id = 'b_chain10' "
                "AND run_id = %s ORDER BY substr(task_id, 2)::int",
                (run_id,),
            ).fetchall()
            parts["first"].append((tasks[0][0] - queued_at).total_seconds())
            parts["inside"] += [(end - start).total_seconds() for start, end in tasks]
            parts["between"] += [
                (b[0] - a[1]).total_seconds() for a, b in itertools.pairwise(tasks)
            ]
            if run_id in followed:
                before, woke = followed[run_id]
                parts["trigger"].append((queued_at - before).total_seconds())
                parts["woken"].append((woke - ended_at).total_seconds())
                parts["whole"].append((woke - before).total_seconds())
    if not done:
        return "chain hops: no finished 10-task chain"

    def ms(key: str) -> str:
        values = parts[key]
        return f"{statistics.median(values) * 1000:.2f} ms" if values else "n/a"

    return (
        f"10-task chain, one hop (medians over {len(done)} runs): trigger call -> queued "
        f"{ms('trigger')}, queued -> first claim {ms('first')}, claim -> finish {ms('inside')}, "
        f"finish -> next claim {ms('between')}, run ended -> follower woke {ms('woken')} "
        f"(whole {ms('whole')})"
    )


def plan_seconds(n: int = 10_000, width: int = 100, rounds: int = 3) -> dict[str, float]:
    """Median time to plan a non-series-parallel DAG of ``n`` tasks: each task waits for two
    random tasks of the level above ("layered"), or for 1-3 of the 50 tasks before it."""
    import random

    from beatflow.dag.model import DAG, TaskSpec
    from beatflow.dag.plan import build_plan

    def make(kind: str) -> DAG:
        rng = random.Random(1)
        dag = DAG(f"plan_{kind}")
        names = [f"n{i}" for i in range(n)]
        for name in names:
            dag.add_task(TaskSpec(task_id=name, fn=lambda: None))
        for i in range(1, n):
            if kind == "layered":
                ups = rng.sample(range((i // width - 1) * width, (i // width) * width), 2)
                ups = ups if i >= width else []
            else:
                ups = rng.sample(range(max(0, i - 50), i), min(i, rng.randint(1, 3)))
            for u in ups:
                dag.tasks[names[i]].order_upstream.add(names[u])
        return dag

    out = {}
    for kind in ("layered", "random"):
        dag = make(kind)
        out[kind] = statistics.median(timed(lambda dag=dag: build_plan(dag)) for _ in range(rounds))
    return out


def fmt(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def report(rows: list[Row], floor: dict[str, float] | None) -> None:
    print()
    print(
        f"{'work':<44} {'raw Celery':>12} {'beatflow':>12} {'ratio':>7} "
        f"{'raw + 2 commits':>16} {'bf / it':>8}  (medians)"
    )
    for row in rows:
        raw, bf = statistics.median(row.raw_times), statistics.median(row.bf_times)
        line = f"{row.label:<44} {fmt(raw):>12} {fmt(bf):>12} {bf / raw:>6.2f}x"
        if row.durable_times:
            durable = statistics.median(row.durable_times)
            line += f" {fmt(durable):>16} {bf / durable:>7.2f}x"
        print(line)
    for row in rows:
        if row.task_runs:
            raw = row.task_runs / statistics.median(row.raw_times)
            both = (
                f", raw + 2 commits {row.task_runs / statistics.median(row.durable_times):,.0f}"
                if row.durable_times
                else ""
            )
            print(f"  {row.label}: task runs/s raw {raw:,.0f}{both}, beatflow {bf_rate(row):,.0f}")
    print()
    print("results DB per task run / per DAG run (pg_stat_database, round 1):")
    header = f"{'work':<44} {'xact/TR':>8} {'fetch/TR':>9} {'ret/TR':>8} {'upd/TR':>7} "
    print(header + f"{'ins/TR':>7} {'xact/DR':>8} {'fetch/DR':>9} {'PG CPU s/1k TR':>15}")
    for row in rows:
        if row.db is None:
            continue
        d, tr, dr = row.db, row.task_runs, row.dag_runs
        print(
            f"{row.label:<44} {d['xact_commit'] / tr:>8.2f} {d['tup_fetched'] / tr:>9.1f} "
            f"{d['tup_returned'] / tr:>8.1f} {d['tup_updated'] / tr:>7.2f} "
            f"{d['tup_inserted'] / tr:>7.2f} {d['xact_commit'] / dr:>8.1f} "
            f"{d['tup_fetched'] / dr:>9.1f} {d['cpu_s'] / tr * 1000:>15.3f}"
        )
    if floor is not None:
        f = floor
        print(
            f"{'floor: bare insert + update (psycopg)':<44} {f['xact_commit'] / 1000:>8.2f} "
            f"{f['tup_fetched'] / 1000:>9.1f} {f['tup_returned'] / 1000:>8.1f} "
            f"{f['tup_updated'] / 1000:>7.2f} {f['tup_inserted'] / 1000:>7.2f} {'':>8} {'':>9} "
            f"{f['cpu_s']:>15.3f}"
        )


SUCCEEDED = re.compile(r"Task (\S+)\[[^\]]*\] succeeded in ([0-9.e-]+)s")


def slot_times(raw_log: Path, bf_log: Path) -> str:
    """How long a worker slot holds each task, by Celery's own "succeeded in" log line (from the
    task's start in the pool to the end of its post-processing: its chain's next step sent, its
    result stored): medians over every task of the run, by side (``raw.noop``, the floor's
    ``raw.durable``, beatflow's node tasks); says so when the loglevel hides the line."""
    sides: dict[str, list[float]] = {"raw": [], "raw + 2 commits": [], "beatflow": []}
    for path in (raw_log, bf_log):
        text = path.read_text(errors="replace") if path.exists() else ""
        for name, seconds in SUCCEEDED.findall(text):
            side = {"raw.noop": "raw", DURABLE: "raw + 2 commits"}.get(name, "beatflow")
            sides[side].append(float(seconds))
    got = [f"{k} {statistics.median(v) * 1000:.2f} ms" for k, v in sides.items() if v]
    if not got:
        return "time in a worker slot per task: no 'succeeded in' lines (loglevel above info)"
    counts = "/".join(f"{len(v):,}" for v in sides.values() if v)
    return f"time in a worker slot per task (medians over {counts} tasks): " + ", ".join(got)


def report_cpu(rows: list[Row]) -> None:
    """Where each side's CPU went in round 1, per task run."""
    shown = [r for r in rows if r.cpu]
    if not shown:
        return
    print()
    print("CPU ms per task run by process (round 1; the Redis server is shared by every side):")
    names = ("client", "consumer", "pool", "redis", "PG")
    print(f"{'work':<44} {'side':<9}" + "".join(f"{n:>9}" for n in names) + f"{'total':>9}")
    for row in shown:
        for side, label in (("raw", "raw"), ("durable", "raw + 2c"), ("bf", "bf")):
            got = row.cpu.get(side)
            if got is None:
                continue
            cells = [got.get(n, 0.0) * 1000 / row.task_runs for n in names]
            print(
                f"{row.label:<44} {label:<9}"
                + "".join(f"{c:>9.2f}" for c in cells)
                + f"{sum(cells):>9.2f}"
            )


def bf_rate(row: Row) -> float:
    return row.task_runs / statistics.median(row.bf_times) if row.bf_times else 0.0


if __name__ == "__main__":
    main()
