"""Run events on Redis pub/sub: a worker announces that a DAG run, or one of its task runs,
changed state, so whoever follows the run (``beatflow dags trigger --wait``, runs.follow) reads
it at once instead of polling. A wake-up only: the results DB stays the truth, and a lost message
costs a follower one fallback poll interval."""

from __future__ import annotations

import logging

import redis
from celery import Celery

log = logging.getLogger(__name__)

CHANNEL_PREFIX = "beatflow:run-events:"
RUN = "run"  # the DAG run changed state (it closed)
TASK = "task"  # one of its task runs changed state


def channel(dag_id: str, run_id: str) -> str:
    return f"{CHANNEL_PREFIX}{dag_id}/{run_id}"


def client_of(app: Celery) -> redis.Redis | None:
    """The Redis client of the app's result backend (beatflow's is always Redis), or None."""
    try:
        client = app.backend.client
    except (AttributeError, redis.RedisError):
        return None
    return client if isinstance(client, redis.Redis) else None


def announce(app: Celery, dag_id: str, run_id: str, kind: str) -> None:
    """Publish ``kind`` (RUN or TASK) on the run's channel; never raises (followers fall back
    to polling when Redis is unreachable)."""
    client = client_of(app)
    if client is None:
        return
    try:
        client.publish(channel(dag_id, run_id), kind)
    except (redis.RedisError, OSError) as exc:
        log.debug("could not announce %s of %s/%s: %s", kind, dag_id, run_id, exc)
