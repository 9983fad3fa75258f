"""Flower's memory over a long soak: does its RSS level off with beatflow's bounds?

Flower's memory depends only on the Celery events it receives. ``--mode events`` (the default)
publishes, with Celery's own EventDispatcher, the events a worker sends for ``--rate`` task runs
per second (task-sent, -received, -started, -succeeded, 1 in 20 -failed, with the fields a
beatflow worker fills: DAG task names, run-id args, ids) plus a worker heartbeat every 2 s: a
steady 30 task runs/s for 30 minutes on a 2-core machine that other jobs share. ``--mode dags``
runs real DAGs on a real worker instead (``--dags`` DAGs of ``--tasks`` chained tasks triggered
every ``--interval`` s; the achieved rate is printed, and is what this machine can do). Two
Flowers watch the same event stream: one as beatflow starts it (BEATFLOW_FLOWER_MAX_TASKS and
friends applied) and one with Flower's stock ``--max_tasks=100000``. Every ``--sample`` seconds
the RSS of both (from /proc), the task runs finished and the broker backlog go to a CSV; the end
prints a summary (RSS by minute and the slope over the last third of the soak).

Everything runs on services of its own: a Redis it starts on a free port and a PostgreSQL
database it creates (and drops) on --postgres, so it disturbs no one.

    nohup .venv/bin/python bench/bench_flower_soak.py --minutes 30 > soak.out 2>&1 &
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]

import redis  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from beatflow.settings import Settings  # noqa: E402

DAG_MODULE = """
from beatflow import DAG, task


@task
def step(n: int) -> int:
    return n + 1


for i in range({dags}):
    with DAG(f"soak_{{i:02d}}", max_active_runs=1000):
        prev = step.override(task_id="t0")(0)
        for j in range(1, {tasks}):
            prev = step.override(task_id=f"t{{j}}")(prev)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"port {port}")


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as f:
        return subprocess.Popen(
            argv, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=str(ROOT), start_new_session=True
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("events", "dags"), default="events")
    parser.add_argument("--rate", type=float, default=30.0, help="task runs/s (events mode)")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--dags", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=3, help="chained tasks per DAG")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between triggers")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--sample", type=float, default=15.0)
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--csv", default="flower_soak.csv")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="beatflow-soak-"))
    (work / "dags").mkdir()
    (work / "dags" / "soak.py").write_text(DAG_MODULE.format(dags=args.dags, tasks=args.tasks))
    redis_port = free_port()
    redis_proc = start(
        ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no"],
        dict(os.environ),
        work / "redis.log",
    )
    wait_port(redis_port)
    db_name = f"bf_soak_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(args.postgres, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{db_name}"'))
    db_url = args.postgres.rsplit("/", 1)[0] + "/" + db_name
    password = uuid.uuid4().hex
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("BEATFLOW_", "FLOWER_"))},
        "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)]),
        "BEATFLOW_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
        "BEATFLOW_DATABASE_URL": db_url,
        "BEATFLOW_DAGS_FOLDER": str(work / "dags"),
        "BEATFLOW_LOG_LEVEL": "WARNING",
        "BEATFLOW_RECONCILE_ENABLED": "false",
        "BEATFLOW_FLOWER_PASSWORD": password,
    }
    settings = Settings.from_env(env)
    from beatflow.app import create_app
    from beatflow.runs import trigger_dag
    from beatflow.runtime import runtime_of
    from beatflow.store import Store

    Store.from_settings(settings).upgrade()
    app = create_app(settings)
    celery = [sys.executable, "-m", "celery", "-A", "beatflow"]
    worker = None
    if args.mode == "dags":
        worker = start(
            [
                *celery,
                "worker",
                "-E",
                "-c",
                str(args.concurrency),
                "-l",
                "warning",
                "--without-mingle",
                "--without-gossip",
                "-n",
                "soak@%h",
            ],
            env,
            work / "worker.log",
        )
    ports = {"beatflow": free_port(), "stock": free_port()}
    flowers = {
        "beatflow": start(
            [*celery, "flower", "--address=127.0.0.1", f"--port={ports['beatflow']}"],
            env,
            work / "flower-beatflow.log",
        ),
        "stock": start(
            [
                *celery,
                "flower",
                "--address=127.0.0.1",
                f"--port={ports['stock']}",
                "--max_tasks=100000",
                "--max_workers=5000",
            ],
            env,
            work / "flower-stock.log",
        ),
    }
    for port in ports.values():
        wait_port(port)
    engine = sa.create_engine(db_url)
    broker = redis.Redis(port=redis_port)
    print(f"work dir {work}; Redis :{redis_port}; database {db_name}; CSV {args.csv}", flush=True)
    print(
        f"settings: flower_max_tasks={settings.flower_max_tasks} "
        f"max_workers={settings.flower_max_workers} "
        f"purge_offline_workers={settings.flower_purge_offline_workers}",
        flush=True,
    )

    rows: list[dict[str, float]] = []
    started = time.monotonic()
    next_trigger = started
    next_sample = started
    n_triggered = 0
    dag_ids = [f"soak_{i:02d}" for i in range(args.dags)]
    events = EventSource(app, args.dags, args.tasks) if args.mode == "events" else None
    try:
        with open(args.csv, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(
                [
                    "minute",
                    "rss_beatflow_mb",
                    "rss_stock_mb",
                    "task_runs_done",
                    "task_runs_per_s",
                    "backlog",
                    "dag_runs_triggered",
                ]
            )
            last_done, last_t = 0, started
            while (now := time.monotonic()) - started < args.minutes * 60:
                if events is not None:
                    events.publish_until(now, started, args.rate)
                    next_trigger = now + 0.05
                elif now >= next_trigger:
                    for dag_id in dag_ids:
                        trigger_dag(runtime_of(app), dag_id)
                        n_triggered += 1
                    next_trigger += args.interval
                if now >= next_sample:
                    done = events.done if events is not None else count_done(engine)
                    rate = (done - last_done) / max(1e-9, now - last_t)
                    last_done, last_t = done, now
                    row = {
                        "minute": round((now - started) / 60, 2),
                        "rss_beatflow_mb": round(rss_mb(flowers["beatflow"].pid), 1),
                        "rss_stock_mb": round(rss_mb(flowers["stock"].pid), 1),
                        "task_runs_done": done,
                        "task_runs_per_s": round(rate, 1),
                        "backlog": int(broker.llen("default")),
                        "dag_runs_triggered": n_triggered,
                    }
                    rows.append(row)
                    writer.writerow(row.values())
                    out.flush()
                    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                    next_sample += args.sample
                time.sleep(max(0.0, min(next_trigger, next_sample) - time.monotonic()))
    finally:
        if events is not None:
            events.close()
        for proc in (*flowers.values(), *([worker] if worker else [])):
            stop(proc)
        app.close()
        engine.dispose()
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)'))
        admin.dispose()
        stop(redis_proc)
    summarise(rows, args.minutes)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def count_done(engine: sa.Engine) -> int:
    with engine.connect() as c:
        sql = sa.text("SELECT count(*) FROM task_runs WHERE state = 'success'")
        return int(c.execute(sql).scalar_one())


class EventSource:
    """The Celery events of a worker running task runs, published at a steady rate."""

    def __init__(self, app: object, dags: int, tasks: int) -> None:
        self.names = [f"soak_{i:02d}.t{j}" for i in range(dags) for j in range(tasks)]
        self.dispatcher = app.events.Dispatcher(  # type: ignore[attr-defined]
            app.connection_for_write(),
            hostname="soak@bench",
            enabled=True,  # type: ignore[attr-defined]
        )
        self.done = 0
        self.last_heartbeat = 0.0

    def publish_until(self, now: float, started: float, rate: float) -> None:
        due = int((now - started) * rate)
        send = self.dispatcher.send
        while self.done < due:
            n = self.done
            task_id = str(uuid.uuid4())
            name = self.names[n % len(self.names)]
            run_id = f"manual__{n // len(self.names)}"
            common = {"uuid": task_id}
            send(
                "task-sent",
                uuid=task_id,
                name=name,
                args=f"('{run_id}',)",
                kwargs="{}",
                retries=0,
                eta=None,
                expires=None,
                queue="default",
                exchange="",
                routing_key="default",
                root_id=task_id,
                parent_id=None,
            )
            send(
                "task-received",
                name=name,
                args=f"('{run_id}',)",
                kwargs="{}",
                retries=0,
                eta=None,
                expires=None,
                root_id=task_id,
                parent_id=None,
                **common,
            )
            send("task-started", **common)
            if n % 20 == 19:
                send(
                    "task-failed",
                    exception="ValueError('soak')",
                    traceback="Traceback (most recent call last):\n  ...\nValueError: soak",
                    **common,
                )
            else:
                send("task-succeeded", result="None", runtime=0.004, **common)
            self.done += 1
        if now - self.last_heartbeat >= 2.0:
            send(
                "worker-heartbeat",
                freq=2.0,
                active=1,
                processed=self.done,
                loadavg=[0.0, 0.0, 0.0],
                sw_ident="py-celery",
                sw_ver="5.7.0",
                sw_sys="Linux",
            )
            self.last_heartbeat = now

    def close(self) -> None:
        self.dispatcher.close()


def summarise(rows: list[dict[str, float]], minutes: float) -> None:
    if not rows:
        return
    print("\nminute  beatflow-Flower MB  stock-Flower MB  task runs/s")
    marks = [m for m in (1, 2, 5, 10, 15, 20, 25, 30, 45, 60) if m <= minutes]
    for m in marks:
        row = min(rows, key=lambda r: abs(r["minute"] - m))
        print(
            f"{m:6}  {row['rss_beatflow_mb']:18.1f}  {row['rss_stock_mb']:15.1f}  "
            f"{row['task_runs_per_s']:11.1f}"
        )
    last = rows[-1]
    third = [r for r in rows if r["minute"] >= last["minute"] * 2 / 3]
    for name in ("rss_beatflow_mb", "rss_stock_mb"):
        span = third[-1]["minute"] - third[0]["minute"]
        slope = (third[-1][name] - third[0][name]) / span if span else 0.0
        print(f"{name}: slope over the last third {slope:+.2f} MB/min")
    total = last["task_runs_done"] / (last["minute"] * 60)
    print(f"task runs: {last['task_runs_done']} in {last['minute']:.1f} min = {total:.1f}/s")


if __name__ == "__main__":
    sys.exit(main())
