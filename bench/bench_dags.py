"""DAG layer benchmark: beatflow vs the same work in raw Celery canvas, side by side in one run,
on the same Redis and the same worker process (results DB on PostgreSQL). Prints ratios.
The raw tasks here run inside beatflow's worker and configuration, so they carry part of its
overhead; bench_throughput.py compares against a stock Celery app in its own worker instead.

    .venv/bin/python bench/bench_dags.py [--repeat 5] [--redis redis://127.0.0.1:6379/13]
        [--pg-admin postgresql+psycopg://postgres@127.0.0.1:5432/test] [--big 10000]

Measures: 10-task chain (whole run, per hop), 1 -> 100 -> 1 fan-out/fan-in, 1 -> 1,000 -> 1 and
a 1 -> N -> 1 run with N = --big (time, worker RSS, Redis memory, largest task message),
compile time of a 1,000-task DAG, load time of 1,000 DAG modules of 10 tasks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import redis
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT), str(ROOT / "bench")]

from celery import chain, chord  # noqa: E402

from beatflow.app import create_app  # noqa: E402
from beatflow.dag.compile import compile_run  # noqa: E402
from beatflow.dag.loader import load_dags  # noqa: E402
from beatflow.runs import follow_run, trigger_dag  # noqa: E402
from beatflow.runtime import runtime_of  # noqa: E402
from beatflow.settings import Settings  # noqa: E402
from beatflow.store import Store  # noqa: E402
from tests import procs  # noqa: E402

BENCH_DAGS = """
from beatflow import DAG, task


@task
def noop(*_: object) -> None:
    return None


with DAG("b_chain10"):
    prev = noop.override(task_id="t0")()
    for i in range(1, 10):
        prev = noop.override(task_id=f"t{i}")(prev)

for width in (100, 1000, BIG):
    with DAG(f"b_fan{width}"):
        src = noop.override(task_id="src")()
        mids = [noop.override(task_id=f"m{i}")() for i in range(width)]
        for m in mids:
            src >> m
        noop.override(task_id="sink")() << mids
"""

MESSAGE_PROBE = '''
"""Records the largest task message this worker publishes (bench only)."""
import json, os
import redis
from celery.signals import before_task_publish

_r = redis.Redis.from_url(os.environ["BEATFLOW_BROKER_URL"])


@before_task_publish.connect
def _size(body=None, headers=None, **_):
    size = len(json.dumps(body, default=str)) + len(json.dumps(headers or {}, default=str))
    _r.eval("local c = tonumber(redis.call('get', KEYS[1]) or '0') "
            "if tonumber(ARGV[1]) > c then redis.call('set', KEYS[1], ARGV[1]) end", 1,
            "bench:max_message", size)
'''


def tree_rss(pid: int) -> int:
    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--pg-admin", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--big", type=int, default=10_000)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="beatflow-bench-"))
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "bench_dags.py").write_text(BENCH_DAGS.replace("BIG", str(args.big)))
    (dags / "zz_message_probe.py").write_text(MESSAGE_PROBE)
    admin = sa.create_engine(args.pg_admin, isolation_level="AUTOCOMMIT")
    db = f"bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{db}"'))
    db_url = sa.make_url(args.pg_admin).set(database=db).render_as_string(hide_password=False)
    r = redis.Redis.from_url(args.redis)
    r.flushdb()
    queue = "bench"
    env = {
        "BEATFLOW_BROKER_URL": args.redis,
        "BEATFLOW_DATABASE_URL": db_url,
        "BEATFLOW_DAGS_FOLDER": str(dags),
        "BEATFLOW_QUEUES": queue,
        "BEATFLOW_LOG_LEVEL": "WARNING",
        "BEATFLOW_TASK_SOFT_TIME_LIMIT": "1200",
        "BEATFLOW_TASK_TIME_LIMIT": "1300",
    }
    settings = Settings.from_env(env)
    Store.from_settings(settings).upgrade()
    app = create_app(settings)
    worker = procs.celery_worker(
        tmp,
        {**env, "PYTHONPATH": f"{ROOT / 'platform'}:{ROOT}:{ROOT / 'bench'}"},
        queues=queue,
        concurrency=2,
        extra_args=("-I", "raw_tasks", "-l", "warning"),
    )
    worker.env["PYTHONPATH"] = f"{ROOT / 'platform'}:{ROOT}:{ROOT / 'bench'}"
    worker.start()
    try:
        procs.wait_worker_ready(app, worker)
        import raw_tasks

        raw_tasks.bind(app)
        noop = app.tasks["raw.noop"]

        def raw_chain() -> None:
            chain(*[noop.si() for _ in range(10)]).apply_async(queue=queue).get(timeout=60)

        def raw_fan(width: int):
            def run() -> None:
                chain(noop.si(), chord([noop.si() for _ in range(width)], noop.si())).apply_async(
                    queue=queue
                ).get(timeout=600)

            return run

        def bf(dag_id: str):
            def run() -> None:
                rec = trigger_dag(runtime_of(app), dag_id)
                final = follow_run(runtime_of(app), dag_id, rec.run_id, timeout=1200, poll=0.005)
                assert final.state == "success", final

            return run

        raw_chain()  # warm up both paths
        bf("b_chain10")()
        rows = []
        for label, raw_fn, bf_fn, rep in [
            ("10-task chain", raw_chain, bf("b_chain10"), args.repeat),
            ("1 -> 100 -> 1", raw_fan(100), bf("b_fan100"), args.repeat),
            ("1 -> 1,000 -> 1", raw_fan(1000), bf("b_fan1000"), max(1, args.repeat // 2)),
        ]:
            raw_all, bf_all = timed(raw_fn, rep), timed(bf_fn, rep)
            print(
                f"{label}: raw {[round(x * 1000, 1) for x in raw_all]} ms, "
                f"beatflow {[round(x * 1000, 1) for x in bf_all]} ms",
                flush=True,
            )
            rows.append((label, statistics.median(raw_all), statistics.median(bf_all)))
        r.delete("bench:max_message")
        rss_before = tree_rss(worker.pid)
        raw_big = timed(raw_fan(args.big), 1)[0]
        redis_raw = int(r.info("memory")["used_memory_peak"])
        r.delete("bench:max_message")
        bf_big = timed(bf(f"b_fan{args.big}"), 1)[0]
        max_msg = int(r.get("bench:max_message") or 0)
        rss_after = tree_rss(worker.pid)
        rows.append((f"1 -> {args.big:,} -> 1", raw_big, bf_big))
        mem = {
            "worker_rss_mb_before": rss_before / 2**20,
            "worker_rss_mb_after": rss_after / 2**20,
            "redis_used_memory_peak_mb": int(r.info("memory")["used_memory_peak"]) / 2**20,
            "redis_peak_after_raw_mb": redis_raw / 2**20,
            "largest_beatflow_message_bytes": max_msg,
        }
    finally:
        worker.stop()
        app.close()

    # compile and load times (in this process)
    bag = load_dags(dags)
    big = bag.dags["b_fan1000"]
    started = time.perf_counter()
    big.plan_cache = None
    compile_run(app, big, "run")
    compile_1000 = time.perf_counter() - started
    many = tmp / "many"
    many.mkdir()
    for i in range(1000):
        (many / f"dag_{i:04d}.py").write_text(
            textwrap.dedent(f"""
            from beatflow import DAG, task

            @task
            def step(x=None):
                return x

            with DAG("many_{i}", schedule="@hourly"):
                prev = step()
                for j in range(9):
                    prev = step(prev)
            """)
        )
    started = time.perf_counter()
    loaded = load_dags(many)
    load_1000 = time.perf_counter() - started
    assert len(loaded.dags) == 1000, loaded.errors[:3]

    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    print(f"{'workload':<22} {'raw celery':>12} {'beatflow':>12} {'ratio':>7}")
    for label, raw_t, bf_t in rows:
        print(f"{label:<22} {raw_t * 1000:>10.1f}ms {bf_t * 1000:>10.1f}ms {bf_t / raw_t:>6.2f}x")
    chain_row = rows[0]
    print(
        f"per hop (10-task chain): raw {chain_row[1] / 10 * 1000:.2f} ms, beatflow "
        f"{chain_row[2] / 10 * 1000:.2f} ms"
    )
    print(f"compile a 1,000-task DAG: {compile_1000 * 1000:.1f} ms")
    print(f"load 1,000 DAG modules of 10 tasks: {load_1000:.2f} s")
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in mem.items()}))


if __name__ == "__main__":
    main()
