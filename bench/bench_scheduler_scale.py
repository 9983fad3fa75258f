"""Scheduler scale: one beat with N scheduled DAGs (default 10,000, all on `* * * * *`, the worst
case: every DAG is due in the same second). Measures the dags-folder load and the first schedule
sync, the time to fire all N at each minute boundary, the beat's CPU per minute and per idle
tick, and the Redis memory the beat's keys take.

    .venv/bin/python bench/bench_scheduler_scale.py --dags 10000 --minutes 3

No worker runs: the fire messages pile up in the queue list, which the harness empties after
each minute (it is the broker's memory, not the beat's). The results DB is a SQLite file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import redis

ROOT = Path(__file__).resolve().parent.parent
PER_MODULE = 100
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"]

MODULE = """from beatflow import DAG, task

@task
def noop() -> int:
    return 1

for i in range({n}):
    with DAG(f"scale_{m}_{{i}}", schedule="* * * * *", timezone={tz!r}):
        noop()
"""

LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*fired (\d+) tick")


def write_dags(folder: Path, n: int) -> None:
    folder.mkdir(parents=True)
    for m in range((n + PER_MODULE - 1) // PER_MODULE):
        count = min(PER_MODULE, n - m * PER_MODULE)
        (folder / f"scale_{m:04d}.py").write_text(
            MODULE.format(n=count, m=m, tz=ZONES[m % len(ZONES)])
        )


def beat_keys_memory(client: redis.Redis) -> int:
    total = 0
    for key in client.scan_iter(match="beatflow:*", count=1000):
        total += int(client.memory_usage(key, samples=0) or 0)
    return total


def fire_batches(log: str) -> list[tuple[float, int]]:
    out = []
    for line in log.splitlines():
        match = LINE.match(line)
        if match:
            ts = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append((ts, int(match.group(2))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dags", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=3)
    parser.add_argument(
        "--redis", default="own", help="a Redis URL, or 'own' to start a private redis-server"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    server = None
    if args.redis == "own":
        from bench_failover import own_redis  # bench/ is on sys.path when run as a script

        args.redis, server = own_redis()
    try:
        run(args)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)


def run(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    write_dags(work / "dags", args.dags)
    client = redis.Redis.from_url(args.redis, decode_responses=True)
    client.flushdb()
    queue = "benchscale"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEATFLOW_")}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)]),
            "BEATFLOW_BROKER_URL": args.redis,
            "BEATFLOW_QUEUES": queue,
            "BEATFLOW_DATABASE_URL": f"sqlite:///{work / 'beatflow.db'}",
            "BEATFLOW_DAGS_FOLDER": str(work / "dags"),
            "BEATFLOW_LOG_FORMAT": "text",
            "BEATFLOW_INSTANCE": "scale",
        }
    )
    subprocess.run(
        [str(Path(sys.executable).parent / "beatflow"), "db", "upgrade"],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    logfile = work / "beat.log"
    used_before = int(client.info("memory")["used_memory"])
    with open(logfile, "wb") as log:
        beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "beatflow", "beat", "-l", "info"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc = psutil.Process(beat.pid)
    result: dict[str, Any] = {"dags": args.dags}
    try:
        started = time.time()
        deadline = started + 300
        while "schedule sync wrote" not in logfile.read_text(errors="replace"):
            if time.time() > deadline or beat.poll() is not None:
                raise SystemExit(f"beat did not sync:\n{logfile.read_text()[-3000:]}")
            time.sleep(0.2)
        text = logfile.read_text(errors="replace")
        load = re.search(r"loaded (\d+) scheduled DAGs in ([\d.]+)s", text)
        sync = re.search(r"schedule sync wrote (\d+) .* in ([\d.]+)s", text)
        result["load_dags_s"] = float(load.group(2)) if load else None
        result["first_sync_write_s"] = float(sync.group(2)) if sync else None
        result["start_to_synced_s"] = round(time.time() - started, 2)
        # let the start-up fires (every DAG's latest tick) drain, then measure whole minutes
        while True:
            now = time.time()
            if now % 60 < 50 and now - started > 5:
                break
            time.sleep(0.5)
        client.delete(queue)
        result["beat_keys_bytes"] = beat_keys_memory(client)
        result["redis_used_memory_delta_bytes"] = (
            int(client.info("memory")["used_memory"]) - used_before
        )
        boundary = (int(time.time()) // 60 + 1) * 60
        time.sleep(max(0.0, boundary - time.time() - 1))
        cpu0 = sum(proc.cpu_times()[:2])
        minutes = []
        for k in range(args.minutes):
            edge = boundary + 60 * k
            while time.time() < edge + 50:
                time.sleep(0.5)
            batches = [
                b
                for b in fire_batches(logfile.read_text(errors="replace"))
                if edge <= b[0] < edge + 50
            ]
            fired = sum(n for _, n in batches)
            last = max((t for t, _ in batches), default=edge) - edge
            first = min((t for t, _ in batches), default=edge) - edge
            minutes.append(
                {
                    "fired": fired,
                    "first_batch_after_s": round(first, 3),
                    "all_fired_after_s": round(last, 3),
                }
            )
            client.delete(queue)
            print(json.dumps(minutes[-1]), flush=True)
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        wall = time.time() - (boundary - 1)
        result["minutes"] = minutes
        result["beat_cpu_s_per_minute"] = round(cpu / (wall / 60), 2)
        result["beat_cpu_share_of_one_core"] = round(cpu / wall, 3)
        # idle ticks: CPU over 20 s with nothing due
        time.sleep((65 - time.time() % 60) % 60)  # :05, after the minute's burst
        cpu1, t1 = sum(proc.cpu_times()[:2]), time.time()
        time.sleep(20)
        result["idle_cpu_share_of_one_core"] = round(
            (sum(proc.cpu_times()[:2]) - cpu1) / (time.time() - t1), 4
        )
        result["rss_mb"] = round(proc.memory_info().rss / 2**20, 1)
        text = logfile.read_text(errors="replace")
        result["lock_lost"] = text.count("lost the lock")
    finally:
        if beat.poll() is None:
            os.killpg(beat.pid, signal.SIGTERM)
            beat.wait(30)
        client.flushdb()
    out = json.dumps(result, indent=2)
    print(out)
    if args.out:
        args.out.write_text(out)


if __name__ == "__main__":
    main()
