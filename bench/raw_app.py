"""A stock Celery app for the side-by-side benchmarks: what a Flower user runs without beatflow
(JSON, acks_late, prefetch 1, task events on, Redis result backend; on RabbitMQ publisher
confirms too). It runs in its own worker
process (``celery -A raw_app worker -E``), never in beatflow's.

``raw.durable`` is the same no-op plus the least any exactly-once scheme writes per task run: a
claim (an INSERT of the task's key) and a finish (an UPDATE of that row), each committed on
its own with a bare psycopg connection to PostgreSQL (``RAW_DURABLE_DSN``, a table
``raw_durable``). Run beside ``raw.noop``, it separates what durability costs on the machine from
what beatflow adds on top of it."""

from __future__ import annotations

import os
from typing import Any

import psycopg
from celery import Celery, Task

app = Celery("raw", broker=os.environ.get("RAW_BROKER_URL", "redis://127.0.0.1:6408/2"))
app.conf.update(
    # on RabbitMQ (bench_rabbitmq.py) results go to Redis, as beatflow's do
    result_backend=os.environ.get("RAW_RESULT_BACKEND") or app.conf.broker_url,
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
if app.conf.broker_url.startswith(("amqp", "pyamqp")):
    # the same delivery guarantee beatflow asks of RabbitMQ: every publish confirmed
    app.conf.broker_transport_options = {"confirm_publish": True}

DURABLE_TABLE = (
    "CREATE TABLE IF NOT EXISTS raw_durable (key text PRIMARY KEY, state text NOT NULL, "
    "result jsonb, started_at timestamptz NOT NULL, ended_at timestamptz)"
)
_conn: dict[int, psycopg.Connection[Any]] = {}  # pid -> this process's connection


def _connection() -> psycopg.Connection[Any]:
    """This process's autocommit connection (a pool process opens its own after the fork)."""
    conn = _conn.get(os.getpid())
    if conn is None or conn.closed:
        conn = _conn[os.getpid()] = psycopg.connect(os.environ["RAW_DURABLE_DSN"], autocommit=True)
    return conn


@app.task(name="raw.noop")
def noop(*_: object) -> None:
    return None


def claim_and_finish(conn: psycopg.Connection[Any], key: str) -> None:
    """The floor's two statements for one task run, each committed on its own (autocommit)."""
    conn.execute(
        "INSERT INTO raw_durable (key, state, started_at) VALUES (%s, 'running', now()) "
        "ON CONFLICT (key) DO NOTHING",
        (key,),
    )
    conn.execute(
        "UPDATE raw_durable SET state = 'success', result = 'null', ended_at = now() "
        "WHERE key = %s AND state = 'running'",
        (key,),
    )


@app.task(name="raw.durable", bind=True)
def durable(self: Task, *_: object) -> None:
    claim_and_finish(_connection(), self.request.id)
    return None
