"""A stock Celery app for the side-by-side benchmarks: what a Flower user runs without beatflow
(JSON, acks_late, prefetch 1, task events on, Redis result backend). It runs in its own worker
process (``celery -A raw_app worker -E``), never in beatflow's."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("raw", broker=os.environ.get("RAW_BROKER_URL", "redis://127.0.0.1:6408/2"))
app.conf.update(
    result_backend=app.conf.broker_url,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    worker_send_task_events=True,
    task_send_sent_event=True,
    task_default_queue="raw",
    broker_connection_retry_on_startup=True,
)


@app.task(name="raw.noop")
def noop(*_: object) -> None:
    return None
