"""What the exporter reads from a real Redis: queue length summed over every priority sub-list
(a bare LLEN undercounts), in-flight messages from kombu's unacked hash, the beat leader."""

from __future__ import annotations

import json

import redis
from celery import Celery
from kombu import Connection

from beatflow.observability import broker
from beatflow.queues import QueueLayout
from beatflow.settings import Settings


def _app(settings: Settings) -> Celery:
    app = Celery("broker-reads", set_as_current=False)
    app.conf.update(settings.celery_config())
    return app


def test_queue_length_sums_every_priority_list_of_the_queue(redis_url: str) -> None:
    settings = Settings(broker_url=redis_url, queues=("default", "io"))
    app = _app(settings)
    try:
        for priority in (0, 3, 5, 9, 9):
            app.send_task("etl.load", args=("r",), queue="default", priority=priority)
        app.send_task("etl.load", queue="io")
    finally:
        app.close()
    client = redis.Redis.from_url(redis_url)
    layout = QueueLayout.from_settings(settings)
    assert client.llen("default") == 1  # what a bare LLEN (celery-exporter, KEDA) would say
    assert layout.lists("default") == [
        "default",
        "default\x06\x163",
        "default\x06\x166",
        "default\x06\x169",
    ]
    assert broker.queue_lengths(client, layout, ("default", "io")) == {"default": 5, "io": 1}


def test_messages_delivered_but_not_acknowledged_count_as_in_flight_for_their_queue(
    redis_url: str,
) -> None:
    settings = Settings(broker_url=redis_url, queues=("default",))
    app = _app(settings)
    try:
        for _ in range(3):
            app.send_task("etl.load", queue="default")
    finally:
        app.close()
    client = redis.Redis.from_url(redis_url)
    layout = QueueLayout.from_settings(settings)
    with Connection(redis_url) as conn:
        queue = conn.SimpleQueue("default")
        message = queue.get(timeout=5)  # delivered, not acked: reserved by a "worker"
        assert broker.in_flight(client, layout) == {"default": 1}
        assert broker.queue_lengths(client, layout, ("default",)) == {"default": 2}
        message.ack()
        assert broker.in_flight(client, layout) == {}
        queue.close()


def test_the_leader_reading_follows_the_beat_keys(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    assert broker.read_leader(client) == broker.Leader(None, 0, ())
    client.set(broker.EPOCH_KEY, 4)
    client.set(broker.LEADER_KEY, json.dumps({"instance": "beat-2", "epoch": 4, "since": 1.0}))
    client.set(broker.REPLICA_PREFIX + "beat-1", "{}")
    client.set(broker.REPLICA_PREFIX + "beat-2", "{}")
    assert broker.read_leader(client) == broker.Leader("beat-2", 4, ("beat-1", "beat-2"))
