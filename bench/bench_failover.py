"""Beat failover after SIGKILL (or SIGTERM, or SIGSTOP then SIGCONT) of the leader, with a
1-second schedule and two beats: beatflow's shipped defaults side by side with RedBeat out of the
box and RedBeat hand-tuned.

    .venv/bin/python bench/bench_failover.py --mode beatflow --failovers 12
    .venv/bin/python bench/bench_failover.py --mode redbeat-tuned --failovers 12
    .venv/bin/python bench/bench_failover.py --mode redbeat-default --failovers 1   # ~30 min
    .venv/bin/python bench/bench_failover.py --mode beatflow --signal STOP --failovers 6

STOP freezes the leader for three lock timeouts, then resumes it (SIGCONT): it must publish
nothing more (``stale_publishes``) and no DAG run of its epoch may appear after the new leader's
first run (``stale_runs``); it rejoins as the standby.

Every beat records each message it publishes (time, instance, tick) in a Redis list through
Celery's ``before_task_publish`` signal, so both schedulers are timed the same way. Takeover =
SIGKILL -> the first fire of the tick due next after the kill (beatflow) or the first fire of
the new leader (RedBeat, whose fires carry no tick). Lost ticks = whole seconds without a fire.
In beatflow mode a worker turns fires into DAG runs and the DB is checked for lost/duplicate runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
FIRES = "bench:failover:fires"
REPLICA = "beatflow:beat:replica:"
LOCK_TIMEOUT = 2.0  # beatflow's shipped BEATFLOW_BEAT_LOCK_TIMEOUT

DAG_SOURCE = """
from datetime import timedelta
from beatflow import DAG, task

@task
def noop() -> int:
    return 1

with DAG("bench_failover", schedule=timedelta(seconds=1), max_active_runs=100000):
    noop()
"""


# ---------------------------------------------------------------- the apps the beats run


def _record(sender: str | None = None, body: Any = None, **_: Any) -> None:
    args = body[0] if isinstance(body, (list, tuple)) and body else []
    ticks: list[str | None] = [None]  # RedBeat's fires carry no tick
    if sender == "beatflow.fire_schedules":
        ticks = [fire[1] for fire in args[0]]
    now, instance = time.time(), os.environ["BENCH_INSTANCE"]
    client = redis.Redis.from_url(os.environ["BENCH_RECORD_URL"])
    client.rpush(FIRES, *[json.dumps({"t": now, "instance": instance, "tick": t}) for t in ticks])
    client.close()


def _beatflow_app() -> Any:
    from celery.signals import before_task_publish

    from beatflow.app import get_app

    before_task_publish.connect(_record, weak=False)
    return get_app()


def _redbeat_app() -> Any:
    from celery import Celery
    from celery.signals import before_task_publish

    url = os.environ["BENCH_RECORD_URL"]
    app = Celery("bench_redbeat", broker=url, set_as_current=True)
    conf: dict[str, Any] = {
        "beat_scheduler": "redbeat.RedBeatScheduler",
        "redbeat_redis_url": url,
        "redbeat_key_prefix": "bench:redbeat:",
        "beat_schedule": {"tick": {"task": "bench.tick", "schedule": 1.0}},
        "timezone": "UTC",
    }
    if os.environ.get("BENCH_MODE") == "redbeat-tuned":
        conf.update(redbeat_lock_timeout=5, beat_max_loop_interval=1)
    app.conf.update(conf)
    before_task_publish.connect(_record, weak=False)
    return app


def __getattr__(name: str) -> Any:  # `celery -A bench.bench_failover:beatflow_app beat`
    if name == "beatflow_app":
        return _beatflow_app()
    if name == "redbeat_app":
        return _redbeat_app()
    raise AttributeError(name)


# ---------------------------------------------------------------- the harness


class Harness:
    def __init__(self, mode: str, redis_url: str, workdir: Path) -> None:
        self.mode, self.redis_url, self.workdir = mode, redis_url, workdir
        self.client = redis.Redis.from_url(redis_url, decode_responses=True)
        self.client.flushdb()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
        self.env.update(
            {
                "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)]),
                "BENCH_RECORD_URL": redis_url,
                "BENCH_MODE": mode,
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.db_name = ""
        if mode == "beatflow":
            (workdir / "dags").mkdir()
            (workdir / "dags" / "bench_failover.py").write_text(DAG_SOURCE)
            self.db_name = f"bench_{uuid.uuid4().hex[:8]}"
            admin = os.environ.get("BENCH_PG_ADMIN", "postgresql+psycopg://postgres@127.0.0.1/test")
            import sqlalchemy as sa

            eng = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
            with eng.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{self.db_name}"'))
            eng.dispose()
            self.admin = admin
            db_url = str(
                sa.make_url(admin).set(database=self.db_name).render_as_string(hide_password=False)
            )
            self.env.update(
                {
                    "BEATFLOW_BROKER_URL": redis_url,
                    "BEATFLOW_DATABASE_URL": db_url,
                    "BEATFLOW_DAGS_FOLDER": str(workdir / "dags"),
                    "BEATFLOW_QUEUES": "benchfailover",
                    "BEATFLOW_LOG_FORMAT": "text",
                }
            )
            from beatflow.settings import Settings
            from beatflow.store import Store

            self.store = Store.from_settings(Settings.from_env(self.env))
            self.store.upgrade()

    def spawn(self, name: str, role: str) -> None:
        target = (
            "bench.bench_failover:beatflow_app"
            if self.mode == "beatflow"
            else "bench.bench_failover:redbeat_app"
        )
        argv = [sys.executable, "-m", "celery", "-A", target, role, "-l", "info"]
        if role == "worker":
            argv = [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "beatflow",
                "worker",
                "-l",
                "warning",
                "-Q",
                "benchfailover",
                "-c",
                "2",
                "--without-mingle",
                "--without-gossip",
            ]
        env = {**self.env, "BENCH_INSTANCE": name, "BEATFLOW_INSTANCE": name}
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        self.procs[name] = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def fires(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.client.lrange(FIRES, 0, -1)]

    def firing_instance(self, since: float) -> str | None:
        recent = [f for f in self.fires() if f["t"] > since]
        return recent[-1]["instance"] if recent else None

    def wait(self, predicate: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.02)
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")

    def wait_standby(self, name: str) -> None:
        """Until the new replica competes for the lock: RedBeat tries from beat_init (logged
        right after "beat: Starting..."), beatflow from its first tick (its replica key)."""
        log = self.workdir / f"{name}.log"
        self.wait(
            lambda: "beat: Starting..." in log.read_text(errors="replace"), 60, f"{name} to start"
        )
        if self.mode == "beatflow":
            self.wait(
                lambda: self.client.exists(f"beatflow:beat:replica:{name}"),
                30,
                f"{name} to compete",
            )
        time.sleep(1.0)  # a few ticks with both replicas up before the next kill

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if self.db_name:
            import sqlalchemy as sa

            self.store.close()
            eng = sa.create_engine(self.admin, isolation_level="AUTOCOMMIT")
            with eng.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)'))
            eng.dispose()


def run(
    mode: str, failovers: int, sig: signal.Signals, redis_url: str, timeout: float
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-failover-{mode}-"))
    h = Harness(mode, redis_url, workdir)
    results: list[dict[str, Any]] = []
    try:
        if mode == "beatflow":
            h.spawn("worker", "worker")
        h.spawn("b0", "beat")
        h.wait(lambda: h.firing_instance(0), 60, "the first fire")
        h.spawn("b1", "beat")
        h.wait_standby("b1")
        serial = 2
        for i in range(failovers):
            leader = h.wait(lambda: h.firing_instance(time.time() - 1.5), 30, "a firing leader")
            # a random phase: the kill must not line up with the standby's polling schedule
            time.sleep(random.uniform(0.0, 1.0))
            killed = time.time()
            os.killpg(h.procs[leader].pid, sig)
            cont = None
            new = h.wait(
                lambda k=killed, lead=leader: next(
                    (f for f in h.fires() if f["t"] > k and f["instance"] != lead), None
                ),
                timeout,
                "the standby's first fire",
            )
            if mode == "beatflow":
                due = math.floor(killed) + 1
                first_next = h.wait(
                    lambda d=due: next(
                        (f for f in h.fires() if f["tick"] and _ts(f["tick"]) == d), None
                    ),
                    30,
                    "the next due tick's fire",
                )
                takeover = first_next["t"] - killed
            else:
                takeover = new["t"] - killed
            before = [f["t"] for f in h.fires() if f["t"] <= killed]
            gap = new["t"] - (before[-1] if before else killed)
            lost_rb = max(0, round(gap) - 1) if mode != "beatflow" else None
            results.append(
                {
                    "i": i,
                    "leader": leader,
                    "new_leader": new["instance"],
                    "takeover_s": round(takeover, 3),
                    "first_fire_s": round(new["t"] - killed, 3),
                    "gap_s": round(gap, 3),
                    "lost_ticks_redbeat": lost_rb,
                }
            )
            if sig == signal.SIGSTOP:
                # frozen past three lock timeouts while the new leader fires, then woken up
                h.wait(lambda k=killed: time.time() > k + 3 * LOCK_TIMEOUT, 30, "the freeze")
                cont = time.time()
                os.killpg(h.procs[leader].pid, signal.SIGCONT)
                h.wait(
                    lambda lead=leader: "follower" in (h.client.get(f"{REPLICA}{lead}") or ""),
                    30,
                    "the woken leader to rejoin as standby",
                )
                time.sleep(1.0)
                results[-1]["stale_publishes"] = sum(
                    1 for f in h.fires() if f["instance"] == leader and f["t"] > cont
                )
            print(json.dumps(results[-1]), flush=True)
            if sig != signal.SIGSTOP:
                h.procs[leader].wait(30)
                h.spawn(f"b{serial}", "beat")
                h.wait_standby(f"b{serial}")
                serial += 1
        summary: dict[str, Any] = {"mode": mode, "signal": sig.name, "failovers": results}
        takeovers = [r["takeover_s"] for r in results]
        summary["takeover_median_s"] = round(statistics.median(takeovers), 3)
        summary["takeover_max_s"] = round(max(takeovers), 3)
        firsts = [r["first_fire_s"] for r in results]
        summary["first_fire_median_s"] = round(statistics.median(firsts), 3)
        summary["first_fire_max_s"] = round(max(firsts), 3)
        if mode == "beatflow":
            time.sleep(3)
            ticks = Counter(_ts(f["tick"]) for f in h.fires() if f["tick"])
            first, last = min(ticks), max(ticks)
            summary["ticks"] = last - first + 1
            summary["lost_fires"] = sum(1 for t in range(first, last + 1) if t not in ticks)
            summary["double_fires"] = sum(1 for n in ticks.values() if n > 1)
            h.wait(
                lambda: len(h.store.list_dag_runs("bench_failover", limit=10**6)) >= len(ticks),
                60,
                "every fire to become a DAG run",
            )
            runs = h.store.list_dag_runs("bench_failover", limit=10**6)
            per_date = Counter(int(r.logical_date.timestamp()) for r in runs if r.logical_date)
            summary["dag_runs"] = len(runs)
            summary["lost_runs"] = sum(1 for t in range(first, last + 1) if t not in per_date)
            summary["duplicate_runs"] = sum(n - 1 for n in per_date.values() if n > 1)
            # fencing: no run of an older epoch created after a newer epoch's first run
            first_of: dict[int, Any] = {}
            for r in runs:
                e = int(r.leader_epoch or 0)
                first_of[e] = min(first_of.get(e, r.queued_at), r.queued_at)
            summary["stale_runs"] = sum(
                1
                for r in runs
                if any(
                    e > int(r.leader_epoch or 0) and r.queued_at > t for e, t in first_of.items()
                )
            )
            if sig == signal.SIGSTOP:
                summary["stale_publishes"] = sum(r["stale_publishes"] for r in results)
        else:
            summary["lost_ticks_total"] = sum(r["lost_ticks_redbeat"] for r in results)
        return summary
    finally:
        h.stop_all()


def _ts(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso).timestamp())


def own_redis() -> tuple[str, subprocess.Popen[bytes]]:
    """A Redis server of the benchmark's own: nothing else can flush or load it."""
    import shutil
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    binary = shutil.which("redis-server") or "redis-server"
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    client.close()
    return url, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--mode", choices=["beatflow", "redbeat-default", "redbeat-tuned"], default="beatflow"
    )
    parser.add_argument("--failovers", type=int, default=12)
    parser.add_argument("--signal", choices=["KILL", "TERM", "STOP"], default="KILL")
    parser.add_argument(
        "--redis", default="own", help="a Redis URL, or 'own' to start a private redis-server"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=2400.0,
        help="seconds to wait for a takeover (RedBeat's default needs ~1,800)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the summary JSON here")
    args = parser.parse_args()
    url, server = own_redis() if args.redis == "own" else (args.redis, None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the cleanup on SIGTERM too
    try:
        summary = run(
            args.mode, args.failovers, signal.Signals[f"SIG{args.signal}"], url, args.timeout
        )
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
