"""Run events on Redis pub/sub: a worker announces that a DAG run, or one of its task runs,
changed state, so whoever follows the run (``beatflow dags trigger --wait``, runs.follow) reads
it at once instead of polling. A wake-up, and for a run's end the run as its closing statement
committed it (``ENDED``), so the follower returns without reading it back; the results DB stays
the truth, and a lost message costs a follower one fallback poll interval."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

import redis
from celery import Celery

from beatflow import keys
from beatflow.states import DAG_RUN_FINAL
from beatflow.store.records import DagRunRecord

log = logging.getLogger(__name__)

CHANNEL_PREFIX = keys.RUN_EVENTS_PREFIX
RUN = "run"  # the DAG run changed state (it closed)
TASK = "task"  # one of its task runs changed state
ENDED = "ended"  # "ended <the run as JSON>": the run as it ended, published just before RUN
_TIMES = ("logical_date", "queued_at", "started_at", "ended_at")
_FIELDS = frozenset(f.name for f in fields(DagRunRecord))


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


def announce_end(app: Celery, record: DagRunRecord) -> None:
    """The run of ``record`` ended (``record`` is the row its closing statement committed):
    publish the run as it ended, then RUN, on its channel, in one round trip. A follower that
    reads the first returns it without reading the run back; one that knows only RUN (an older
    version, during a rolling upgrade) wakes on the second and reads. Never raises."""
    client = client_of(app)
    if client is None:
        return
    name = channel(record.dag_id, record.run_id)
    as_json = {k: _plain(v) for k, v in asdict(record).items()}
    try:
        pipe = client.pipeline(transaction=False)
        pipe.publish(name, f"{ENDED} {json.dumps(as_json, default=str)}")
        pipe.publish(name, RUN)
        pipe.execute()
    except (redis.RedisError, OSError) as exc:
        log.debug("could not announce the end of %s/%s: %s", record.dag_id, record.run_id, exc)


def ended_run(data: str, dag_id: str, run_id: str) -> DagRunRecord | None:
    """The run an ``ENDED`` message carries, when it is well formed, this run's and final;
    None for anything else (the follower then reads the run from the results DB)."""
    if not data.startswith(ENDED + " "):
        return None
    try:
        raw: Any = json.loads(data[len(ENDED) + 1 :])
        if not isinstance(raw, dict) or not _FIELDS.issuperset(raw):
            return None
        for name in _TIMES:
            if raw.get(name) is not None:
                raw[name] = datetime.fromisoformat(raw[name])
        record = DagRunRecord(**raw)
    except (ValueError, TypeError):
        return None
    if (record.dag_id, record.run_id) != (dag_id, run_id) or record.state not in DAG_RUN_FINAL:
        return None
    if not isinstance(record.conf, dict) or record.ended_at is None:
        return None
    return record


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value
