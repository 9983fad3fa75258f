"""What the exporter reads from a real RabbitMQ over AMQP (no management plugin): a queue's ready
messages from a passive declare (every priority in one count; delivered-but-unacked excluded),
its consumers, and an undeclared queue as empty. Queue names are unique per test and expire, so
parallel runs on the shared broker do not see each other's messages."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from celery import Celery
from kombu import Connection, Consumer, Exchange, Queue

from beatflow.observability.rabbitmq import QueueReader, QueueReading, is_amqp
from tests import services


@pytest.fixture
def rabbitmq_url(rabbitmq_server: services.RabbitServer) -> str:
    return rabbitmq_server.url


@pytest.fixture
def names() -> Iterator[tuple[str, str, str]]:
    tag = uuid.uuid4().hex[:10]
    yield (f"bf-exp-{tag}-a", f"bf-exp-{tag}-b", f"bf-exp-{tag}-never")


def _queue(name: str) -> Queue:
    # durable and priority-declared as beatflow's queues are; x-expires cleans up after a crash
    return Queue(
        name,
        Exchange(name, type="direct"),
        routing_key=name,
        durable=True,
        queue_arguments={"x-max-priority": 10, "x-expires": 120_000},
    )


def test_the_url_schemes_of_rabbitmq_are_recognised() -> None:
    assert is_amqp("amqp://guest:guest@127.0.0.1:5672//")
    assert is_amqp("amqps://u:p@mq.example:5671/prod")
    assert is_amqp("pyamqp://127.0.0.1//")
    assert not is_amqp("redis://127.0.0.1:6379/0")
    assert not is_amqp("sentinel://h:26379")


def test_passive_declares_count_ready_messages_and_consumers(
    rabbitmq_url: str, names: tuple[str, str, str]
) -> None:
    a, b, never = names
    app = Celery("rabbitmq-reads", broker=rabbitmq_url, set_as_current=False)
    reader = QueueReader(app)
    with Connection(rabbitmq_url) as conn:
        producer = conn.Producer()
        for queue, priority in ((a, 0), (a, 5), (a, 9), (b, 0)):
            q = _queue(queue)
            producer.publish(
                {"n": priority},
                exchange=q.exchange,
                routing_key=queue,
                declare=[q],
                priority=priority,
                serializer="json",
            )
        try:
            # every priority in one count; a queue nobody declared reads as empty, and the
            # reader keeps going after RabbitMQ closed its channel on that 404
            assert reader.read((a, never, b)) == {
                a: QueueReading(3, 0),
                never: QueueReading(0, 0),
                b: QueueReading(1, 0),
            }
            with conn.channel() as channel:
                channel.basic_qos(0, 1, False)
                held = []
                consumer = Consumer(
                    channel, queues=[_queue(a)], callbacks=[lambda _b, m: held.append(m)]
                )
                with consumer:
                    while not held:
                        conn.drain_events(timeout=5)
                    # one delivered and not acked: RabbitMQ's message_count leaves it out
                    assert reader.read((a,)) == {a: QueueReading(2, 1)}
                    held[0].ack()
            assert reader.read((a, b)) == {a: QueueReading(2, 0), b: QueueReading(1, 0)}
        finally:
            reader.close()
            with conn.channel() as channel:
                for queue in (a, b):
                    channel.queue_delete(queue)


def test_the_exporter_serves_rabbitmq_queue_gauges_and_adds_held_messages_to_the_backlog(
    rabbitmq_url: str, redis_url: str, names: tuple[str, str, str]
) -> None:
    from beatflow.app import create_app
    from beatflow.observability.exporter import Exporter
    from beatflow.settings import Settings

    a, b, _ = names
    settings = Settings(broker_url=rabbitmq_url, redis_url=redis_url, queues=(a, b))
    app = create_app(settings)
    exporter = Exporter(app, load_dag_folder=False)
    assert exporter.rabbitmq is not None and "rabbitmq" in exporter.sources
    try:
        for _ in range(2):
            app.send_task("etl.load", queue=a)
        # a third message of queue a is held by a worker (delivered, not acknowledged)
        exporter.handler.handle({"type": "task-sent", "uuid": "u1", "name": "etl.load", "queue": a})
        exporter.handler.handle({"type": "task-received", "uuid": "u1", "hostname": "w@h"})
        exporter.poll_rabbitmq()

        def gauge(name: str, queue: str) -> float | None:
            return exporter.metrics.registry.get_sample_value(name, {"queue_name": queue})

        assert gauge("celery_queue_length", a) == 2
        assert gauge("beatflow_queue_backlog", a) == 3
        assert gauge("celery_active_consumer_count", a) == 0
        assert gauge("celery_queue_length", b) == 0  # declared by nobody yet
    finally:
        exporter.rabbitmq.close()
        with Connection(rabbitmq_url) as conn, conn.channel() as channel:
            channel.queue_delete(a)
        app.close()


def test_a_rabbitmq_crash_marks_its_source_down_until_the_node_is_back(
    own_rabbitmq: services.OwnedRabbit, redis_url: str
) -> None:
    from beatflow.app import create_app
    from beatflow.observability.exporter import Exporter
    from beatflow.settings import Settings

    settings = Settings(broker_url=own_rabbitmq.url, redis_url=redis_url, queues=("default",))
    app = create_app(settings)
    exporter = Exporter(app, load_dag_folder=False)
    registry = exporter.metrics.registry

    def up() -> float | None:
        return registry.get_sample_value("beatflow_exporter_source_up", {"source": "rabbitmq"})

    def wait(value: float, what: str) -> None:
        deadline = time.monotonic() + 60
        while up() != value:
            assert time.monotonic() < deadline, f"rabbitmq source never {what}"
            time.sleep(0.1)

    exporter._spawn("rabbitmq-poll", 0.2, exporter.poll_rabbitmq, "rabbitmq")
    try:
        wait(1, "up")
        own_rabbitmq.kill()
        wait(0, "down")
        assert exporter.health()[1]["sources"] == {
            "events": 0,  # not started here
            "redis": 0,
            "database": 0,
            "rabbitmq": 0,
        }
        own_rabbitmq.start()
        wait(1, "up again")  # a new connection, no restart of the exporter
    finally:
        exporter._stop.set()
        assert exporter.rabbitmq is not None
        exporter.rabbitmq.close()
        app.close()
