"""The exporter under load: (1) does a real `beatflow exporter` keep up with 1,000 Celery events
per second (its CPU, how far behind it falls, how long it takes to drain), and (2) how long does
a scrape of /metrics take with 1,000 DAGs loaded (every DAG's counters, runs by state from a
real database, Celery task series for every task).

    .venv/bin/python bench/bench_exporter.py --redis-url redis://127.0.0.1:6379/15
    .venv/bin/python bench/bench_exporter.py --rate 2000 --seconds 20     # push harder

Events are published from this process with Celery's own EventDispatcher at a fixed rate, in
the mix a worker sends per task run: task-sent, task-received, task-started, task-succeeded and
beatflow-task-run-finished (5 events per task run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psutil
import redis
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]

from beatflow.settings import Settings  # noqa: E402


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_value(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as r:  # local URL
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and not s.labels:
                return float(s.value)
    return 0.0


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(url)


# ---------------------------------------------------------------- part 1: event throughput


def publish(redis_url: str, rate: float, seconds: float, offset: int, sent: Any) -> None:
    """One publisher process: ``rate`` events/s for ``seconds``, counting into ``sent``."""
    app = Celery("bench", set_as_current=False)
    app.conf.update(Settings(broker_url=redis_url).celery_config())
    n = 0
    with app.events.default_dispatcher(hostname=f"bench{offset}@host") as dispatcher:
        start = time.monotonic()
        while (now := time.monotonic()) - start < seconds:
            due = int((now - start) * rate)
            while n < due:
                i = n // 5 * 100 + offset
                uid = f"bench-{i}"
                name = f"dag{i % 1000}.task{i % 3}"
                kind = n % 5
                if kind == 0:
                    dispatcher.send("task-sent", uuid=uid, name=name, queue="default")
                elif kind == 1:
                    dispatcher.send("task-received", uuid=uid, name=name)
                elif kind == 2:
                    dispatcher.send("task-started", uuid=uid)
                elif kind == 3:
                    dispatcher.send("task-succeeded", uuid=uid, runtime=0.01)
                else:
                    dispatcher.send(
                        "beatflow-task-run-finished",
                        dag_id=f"dag{i % 1000}",
                        task_id=f"task{i % 3}",
                        state="success",
                        duration=0.01,
                    )
                n += 1
                with sent.get_lock():
                    sent.value += 1
            time.sleep(0.002)
    app.close()


def bench_events(
    redis_url: str, rate: int, seconds: float, tmp: Path, publishers: int
) -> dict[str, float]:
    import multiprocessing as mp

    port = free_port()
    env = {
        **os.environ,
        "BEATFLOW_BROKER_URL": redis_url,
        "BEATFLOW_DATABASE_URL": f"sqlite:///{tmp / 'events.db'}",
        "BEATFLOW_DAGS_FOLDER": str(tmp),
        "BEATFLOW_METRICS_PORT": str(port),
        "BEATFLOW_LOG_FORMAT": "json",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)]),
    }
    log = open(tmp / "exporter.log", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from beatflow.cli import main; sys.exit(main())",
            "exporter",
            "--host",
            "127.0.0.1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_http(url)
        time.sleep(1.0)  # let the receiver subscribe
        exporter = psutil.Process(proc.pid)
        base = scrape_value(url, "beatflow_exporter_events_total")
        sent = mp.Value("q", 0)
        workers = [
            mp.Process(target=publish, args=(redis_url, rate / publishers, seconds, k, sent))
            for k in range(publishers)
        ]
        behind: list[float] = []
        lags: list[float] = []
        cpu0, t0 = exporter.cpu_times(), time.monotonic()
        for w in workers:
            w.start()
        while any(w.is_alive() for w in workers):
            time.sleep(1.0)
            seen = scrape_value(url, "beatflow_exporter_events_total") - base
            behind.append(max(0.0, sent.value - seen))
            lags.append(scrape_value(url, "beatflow_exporter_event_lag_seconds"))
        publish_end = time.monotonic()
        cpu1 = exporter.cpu_times()
        total = sent.value
        drained = None
        while time.monotonic() - publish_end < 60:
            if scrape_value(url, "beatflow_exporter_events_total") - base >= total:
                drained = time.monotonic() - publish_end
                break
            time.sleep(0.05)
        wall = publish_end - t0
        cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall
        return {
            "sent": total,
            "rate": total / wall,
            "cpu_percent": 100 * cpu,
            "behind_max": max(behind or [0]),
            "behind_median": statistics.median(behind or [0]),
            "lag_p50": statistics.median(lags or [0]),
            "lag_max": max(lags or [0]),
            "drain_seconds": -1.0 if drained is None else drained,
            "rss_mb": exporter.memory_info().rss / 2**20,
            "lost": max(0.0, total - (scrape_value(url, "beatflow_exporter_events_total") - base)),
        }
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


# ---------------------------------------------------------------- part 2: scrape with 1,000 DAGs

DAGS_MODULE = """
from datetime import timedelta
from beatflow import DAG, task

@task
def extract() -> int:
    return 1

@task
def transform(x: int) -> int:
    return x

@task
def load(x: int) -> None:
    return None

for i in range({n}):
    with DAG(f"bench_dag_{{i:04d}}", sla=timedelta(hours=1)):
        load(transform(extract()))
"""


def bench_scrape(redis_url: str, n_dags: int, tmp: Path, scrapes: int) -> dict[str, float]:
    from beatflow.app import create_app
    from beatflow.observability.exporter import Exporter
    from beatflow.observability.render import Renderer
    from beatflow.store import Store

    dags = tmp / "dags"
    dags.mkdir()
    (dags / "many.py").write_text(DAGS_MODULE.format(n=n_dags))
    db = f"sqlite:///{tmp / 'scrape.db'}"
    store = Store(db)
    store.upgrade()
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    for i in range(n_dags):
        dag_id = f"bench_dag_{i:04d}"
        for j, state in enumerate(("success", "success", "failed")):
            store.create_dag_run(dag_id, f"r{j}", logical_date=now)
            store.mark_dag_run_running(dag_id, f"r{j}")
            store.finish_dag_run(dag_id, f"r{j}", state)
    settings = Settings(broker_url=redis_url, database_url=db, dags_folder=str(dags))
    ex = Exporter(create_app(settings, load_dags=False), redis_interval=3600, db_interval=3600)
    t = time.perf_counter()
    ex._reload_dags()  # the bench drives the parts directly
    load_s = time.perf_counter() - t
    h = ex.handler
    for i in range(n_dags):  # one run of every task through one worker: the Celery series
        for task in ("extract", "transform", "load"):
            uid = uuid.uuid4().hex
            name = f"bench_dag_{i:04d}.{task}"
            h.handle(
                {
                    "type": "task-sent",
                    "uuid": uid,
                    "name": name,
                    "queue": "default",
                    "hostname": "beat-1",
                }
            )
            h.handle({"type": "task-received", "uuid": uid, "name": name, "hostname": "w1@h"})
            h.handle({"type": "task-started", "uuid": uid, "hostname": "w1@h"})
            h.handle({"type": "task-succeeded", "uuid": uid, "hostname": "w1@h", "runtime": 0.1})
        h.handle(
            {
                "type": "beatflow-dag-run-finished",
                "dag_id": f"bench_dag_{i:04d}",
                "state": "success",
                "duration": 12.0,
            }
        )
    t = time.perf_counter()
    ex.poll_database()
    poll_s = time.perf_counter() - t
    server = ex.serve("127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    times: list[float] = []
    size = 0
    for _ in range(scrapes):
        t = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read()
        times.append(time.perf_counter() - t)
        size = len(body)
    samples = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    from prometheus_client import generate_latest

    t = time.perf_counter()
    generate_latest(ex.metrics.registry)  # the client's own rendering, for comparison
    reference_s = time.perf_counter() - t
    collector_s = statistics.median(collector_render_s(ex.metrics.all()) for _ in range(5))
    renderer = Renderer(ex.metrics.registry, ex.metrics.all())
    renderer.render()  # the first render builds the label cache, as the exporter's first scrape
    renderer_s = statistics.median(_timed(renderer.render) for _ in range(5))
    ex.stop()
    store.close()
    return {
        "dags": n_dags,
        "samples": samples,
        "bytes": size,
        "load_dags_s": load_s,
        "db_poll_s": poll_s,
        "scrape_p50_s": statistics.median(times),
        "scrape_max_s": max(times),
        "generate_latest_s": reference_s,
        "collector_s": collector_s,
        "renderer_s": renderer_s,
    }


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def collector_render_s(metrics: Any) -> float:
    """Seconds to render the same series the public way: a custom Collector yielding
    *MetricFamily objects, rendered by ``generate_latest`` (the alternative to
    observability/render.py, which reads prometheus-client's children directly). The values are
    read from the children as render.py reads them: a Collector over our own dicts would read
    them no faster."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.registry import Collector

    metrics = list(metrics)

    def children(metric: Any) -> list[tuple[tuple[str, ...], Any]]:
        if not metric._labelnames:
            return [((), metric)]
        with metric._lock:
            return list(metric._metrics.items())

    class Families(Collector):
        def collect(self) -> Any:
            for metric in metrics:
                name, doc, labels = metric._name, metric._documentation, metric._labelnames
                family: Any
                if isinstance(metric, Counter | Gauge):
                    kind = CounterMetricFamily if isinstance(metric, Counter) else GaugeMetricFamily
                    family = kind(name, doc, labels=labels)
                    for values, child in children(metric):
                        family.add_metric(values, child._value.get())
                else:
                    family = HistogramMetricFamily(name, doc, labels=labels)
                    for values, child in children(metric):
                        total, buckets = 0.0, []
                        for bound, bucket in zip(metric._upper_bounds, child._buckets, strict=True):
                            total += bucket.get()
                            buckets.append((str(bound), total))
                        family.add_metric(values, buckets, child._sum.get())
                yield family

    registry = CollectorRegistry()
    registry.register(Families())
    t = time.perf_counter()
    generate_latest(registry)
    return time.perf_counter() - t


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BEATFLOW_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"),
    )
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--dags", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument(
        "--publishers",
        type=int,
        default=2,
        help="publisher processes (one Python process tops out near 600/s)",
    )
    parser.add_argument("--scrape-only", action="store_true", help="skip the event part")
    args = parser.parse_args()
    redis.Redis.from_url(args.redis_url).flushdb()
    if not args.scrape_only:
        with tempfile.TemporaryDirectory(prefix="bench-exporter-") as tmp:
            ev = bench_events(args.redis_url, args.rate, args.seconds, Path(tmp), args.publishers)
            print(
                f"events: {ev['sent']} sent at {ev['rate']:.0f}/s for {args.seconds:.0f}s; "
                f"exporter CPU {ev['cpu_percent']:.0f}% of one core, RSS {ev['rss_mb']:.0f} MB; "
                f"behind by median {ev['behind_median']:.0f} / max {ev['behind_max']:.0f} events; "
                f"event lag p50 {ev['lag_p50'] * 1000:.1f} ms / max {ev['lag_max'] * 1000:.1f} ms;"
                f" drained {ev['drain_seconds']:.2f}s after the last publish; lost {ev['lost']:.0f}"
            )
    with tempfile.TemporaryDirectory(prefix="bench-exporter-") as tmp:
        sc = bench_scrape(args.redis_url, args.dags, Path(tmp), args.scrapes)
        print(
            f"scrape: {sc['dags']} DAGs, {sc['samples']} samples, {sc['bytes'] / 1024:.0f} KiB;"
            f" /metrics p50 {sc['scrape_p50_s'] * 1000:.0f} ms, max "
            f"{sc['scrape_max_s'] * 1000:.0f} ms; rendering alone, in-process: render.py "
            f"{sc['renderer_s'] * 1000:.0f} ms, a Collector of *MetricFamily through "
            f"generate_latest {sc['collector_s'] * 1000:.0f} ms, generate_latest on the registry "
            f"{sc['generate_latest_s'] * 1000:.0f} ms; loading the DAGs "
            f"{sc['load_dags_s']:.2f}s, one DB poll {sc['db_poll_s']:.2f}s"
        )
    redis.Redis.from_url(args.redis_url).flushdb()
    return 0


if __name__ == "__main__":
    sys.exit(main())
