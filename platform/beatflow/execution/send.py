"""Sending a group of task messages with their ``task-sent`` events in one event message.

Celery publishes a ``task-sent`` event beside every task message it sends (the app sets
``task_send_sent_event``, which Flower and celery-exporter read). Each is a message of its own:
about 250–280 µs of the sender's CPU per task here (bench/bench_send_cost.py, "send_task" against
"no task-sent event"), which for a ``.map()`` lands in the worker that expands it. Celery's own
dispatcher can buffer events and send them as a list in one ``<group>.multi`` message, and
every Celery event receiver (Flower's, celery-exporter's, beatflow's exporter) takes a list
body as that many events. ``send_group`` sends a group's tasks through one producer with a
dispatcher that collects their ``task-sent`` events, then publishes them in one message."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery
from celery.canvas import Signature
from celery.events.event import Event
from celery.utils.time import utcoffset
from kombu.messaging import Producer

log = logging.getLogger(__name__)


class _SentEvents:
    """Takes Celery's ``event_dispatcher.publish('task-sent', ...)`` calls while a group is
    sent and keeps the events, stamped as Celery's dispatcher stamps them (hostname, clock,
    utcoffset; the pid is the sending process's, where Celery's cached dispatcher may carry the
    pid it was made in), for one ``task.multi`` message. Published here rather than through the
    dispatcher, which would keep an event it cannot send in a buffer nothing flushes."""

    def __init__(self, app: Celery) -> None:
        self.dispatcher = app.amqp._event_dispatcher  # Celery's own for task-sent
        self.events: list[dict[str, Any]] = []

    def publish(
        self, type: str, fields: dict[str, Any], producer: Producer, blind: bool = False, **_: Any
    ) -> None:
        d = self.dispatcher
        clock = None if blind else d.clock.forward()
        self.events.append(
            Event(type, hostname=d.hostname, utcoffset=utcoffset(), pid=os.getpid(),
                  clock=clock, **fields)
        )  # fmt: skip

    def flush(self, producer: Producer) -> None:
        if not self.events:
            return
        d = self.dispatcher
        try:
            producer.publish(  # type: ignore[no-untyped-call]
                self.events,
                routing_key="task.multi",
                exchange=d.exchange.name,
                declare=[d.exchange],
                serializer=d.serializer,
                headers=d.headers,
                delivery_mode=d.delivery_mode,
            )
        except Exception:  # the tasks went; their events are for monitoring only
            log.warning("could not send %d task-sent events", len(self.events), exc_info=True)
        self.events = []


def send_group(app: Celery, sig: Signature) -> None:
    """``sig.apply_async()`` (a group of plain tasks), its ``task-sent`` events in one message.
    A send that fails raises as ``apply_async`` would; the events of what went are sent."""
    with app.producer_or_acquire() as producer:
        events = _SentEvents(app)  # collects nothing when task_send_sent_event is off
        try:
            sig.apply_async(producer=producer, event_dispatcher=events)
        finally:
            events.flush(producer)
