"""What one task message costs its sender in CPU: Celery's own publish path, a stock app beside
beatflow's app (its Redis transport, its settings), to a queue no worker reads. This is what a
``.map()`` expansion pays per instance inside a worker, and what raw Celery's client pays for a
group (bench_throughput's 10,000-wide row); and the announcement of a run's end, which a
worker now publishes only for a followed run.

    .venv/bin/python bench/bench_send_cost.py [--messages 3000] [--redis redis://127.0.0.1:6408]

Each way is measured twice (the second figure is printed); CPU µs per message from
``time.process_time``, wall µs beside it. The scratch Redis database (15) is emptied after."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT), str(ROOT / "bench")]

import redis  # noqa: E402
from celery import group  # noqa: E402

from beatflow.app import create_app  # noqa: E402
from beatflow.execution import announce  # noqa: E402
from beatflow.execution.send import send_group  # noqa: E402
from beatflow.settings import Settings  # noqa: E402

QUEUE = "bench-send-cost-nobody"


def per_message(n: int, send: Callable[[], None]) -> tuple[float, float]:
    """CPU and wall µs per message of ``send`` (which sends ``n``), the second of two runs."""
    result = (0.0, 0.0)
    for _ in range(2):
        cpu, wall = time.process_time(), time.perf_counter()
        send()
        result = ((time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6)
    return result


def ways(app: Any, name: str, n: int) -> dict[str, Callable[[], None]]:
    def as_group() -> None:
        group([app.signature(name, args=(i,), queue=QUEUE) for i in range(n)]).apply_async()

    def one_producer() -> None:
        with app.producer_or_acquire() as producer:
            for i in range(n):
                app.send_task(name, (i,), queue=QUEUE, producer=producer)

    def sent_events_batched() -> None:
        send_group(app, group([app.signature(name, args=(i,), queue=QUEUE) for i in range(n)]))

    def no_sent_event() -> None:
        before = app.conf.task_send_sent_event
        app.conf.task_send_sent_event = False
        try:
            one_producer()
        finally:
            app.conf.task_send_sent_event = before

    return {
        "group.apply_async": as_group,
        "group, events in one message": sent_events_batched,
        "send_task, one producer": one_producer,
        "send_task, no task-sent event": no_sent_event,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--redis", default="redis://127.0.0.1:6408")
    args = parser.parse_args()
    url = f"{args.redis}/15"
    os.environ["RAW_BROKER_URL"] = url
    import raw_app

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_env(
            {
                "BEATFLOW_BROKER_URL": url,
                "BEATFLOW_DATABASE_URL": f"sqlite:///{tmp}/unused.db",
                "BEATFLOW_DAGS_FOLDER": tmp,
            }
        )
        bf = create_app(settings)
        try:
            sides = {"raw": ways(raw_app.app, "raw.noop", args.messages)}
            sides["beatflow"] = ways(bf, "bench.noop", args.messages)
            print(f"{'µs per message (CPU / wall)':<32} {'raw Celery':>16} {'beatflow':>16} ratio")
            for way in sides["raw"]:
                raw = per_message(args.messages, sides["raw"][way])
                ours = per_message(args.messages, sides["beatflow"][way])
                print(
                    f"{way:<32} {raw[0]:>7.0f} / {raw[1]:>6.0f} {ours[0]:>7.0f} / {ours[1]:>6.0f} "
                    f"{ours[0] / raw[0]:>5.2f}x"
                )

            # what a worker saves per DAG run nobody follows (migration 0013)
            def announce_ends() -> None:
                for i in range(args.messages):
                    announce.announce(bf, "bench", f"r{i}", announce.RUN)

            cpu, wall = per_message(args.messages, announce_ends)
            print(f"{'a run end announced (PUBLISH)':<32} {'':>16} {cpu:>7.0f} / {wall:>6.0f}")
        finally:
            bf.close()
            redis.Redis.from_url(url).flushdb()


if __name__ == "__main__":
    main()
