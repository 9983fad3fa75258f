"""Sending many task messages in one round trip to the broker, their ``task-sent`` events in
one event message.

Celery publishes a ``task-sent`` event beside every task message it sends (the app sets
``task_send_sent_event``, which Flower and celery-exporter read). Each is a message of its own:
about 250–280 µs of the sender's CPU per task here (bench/bench_send_cost.py, "send_task" against
"no task-sent event"), which for a ``.map()`` lands in the worker that expands it, and for the
runs of a beat's fire batch in the worker that dispatches them. Celery's own dispatcher can buffer
events and send them as a list in one ``<group>.multi`` message, and every Celery event receiver
(Flower's, celery-exporter's, beatflow's exporter) takes a list body as that many events. And
each message is a Redis ``LPUSH`` awaited on its own, where kombu (5.7) can buffer a producer's
publishes and send them in one pipeline (``Producer.batch``).

In a ``sending_together`` block, the app's event dispatcher (``BatchingDispatcher``, set by
``create_app`` as the app's ``events.Dispatcher``) keeps the ``task-sent`` events of whatever the
block sends — tasks, groups, chains, chords — and every send of the block takes the block's
producer (``BatchingCelery.producer_or_acquire``, where Celery's sends take theirs: canvas code
is left to publish as it always does, since an apply option such as a producer would be copied
into a chord's body and serialised with it), whose publishes the block buffers. The block ends
by adding the events in one message and sending it all in one pipeline. An app built otherwise
sends its messages and events one by one, as Celery does. On RabbitMQ (py-amqp has no publish
batches) kombu publishes each message of a block at once, each awaiting its publisher confirm;
the block's ``task-sent`` events still go as one message.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery.app.events import Events
from celery.canvas import Signature
from celery.events.dispatcher import EventDispatcher
from celery.events.event import Event
from celery.utils.time import utcoffset
from kombu.exceptions import BatchPublishError, OperationalError
from kombu.messaging import Producer

log = logging.getLogger(__name__)

# Redis commands a block buffers before it sends them (a block sending more sends in steps)
BATCH_COMMANDS = 1000


@dataclass
class _Block:
    """A ``sending_together`` block of this thread: its app, the ``task-sent`` events kept, and
    the producer every send of the block publishes through (its messages buffered in one kombu
    publish batch)."""

    app: Celery
    events: list[dict[str, Any]]
    producer: Producer


_BLOCK: contextvars.ContextVar[_Block | None] = contextvars.ContextVar(
    "beatflow_sending_together", default=None
)


class BatchingDispatcher(EventDispatcher):  # type: ignore[misc]
    """Celery's event dispatcher, which keeps the ``task-sent`` events its app publishes in a
    ``sending_together`` block of this thread, stamped as Celery stamps them (hostname, clock,
    utcoffset; the pid is the sending process's, where Celery's cached dispatcher may carry the
    pid it was made in)."""

    def publish(self, type: str, fields: dict[str, Any], producer: Any, blind: bool = False,
                Event: Any = Event, **kwargs: Any) -> Any:  # fmt: skip
        block = _BLOCK.get()
        if block is None or type != "task-sent" or block.app is not self.app:
            return super().publish(type, fields, producer, blind=blind, Event=Event, **kwargs)
        clock = None if blind else self.clock.forward()
        block.events.append(
            Event(type, hostname=self.hostname, utcoffset=utcoffset(), pid=os.getpid(),
                  clock=clock, **fields)
        )  # fmt: skip
        return None


class BatchingEvents(Events):  # type: ignore[misc]
    """The app's ``events``, whose Dispatcher is ``BatchingDispatcher``."""

    dispatcher_cls = f"{__name__}:BatchingDispatcher"


class BatchingCelery(Celery):  # type: ignore[misc]
    """Celery, whose sends in a ``sending_together`` block of this thread go through the block's
    producer: ``producer_or_acquire`` is where Celery's task, group and chord sends (and a
    chain's first step) take theirs."""

    def producer_or_acquire(self, producer: Producer | None = None) -> Any:
        block = _BLOCK.get()
        if producer is None and block is not None and block.app is self:
            producer = block.producer
        return super().producer_or_acquire(producer)


@contextlib.contextmanager
def sending_together(app: Celery) -> Iterator[None]:
    """A block whose sends reach the broker together when it ends: their messages, and their
    ``task-sent`` events in one ``task.multi`` message, in one Redis round trip. A block that
    raises still sends what it sent before its error (that send failing is logged: the block's
    own error is the one raised). A send that fails when the block ends raises as a publish to
    an unreachable broker does (``kombu.exceptions.OperationalError``), and whether any of the
    block's messages arrived is then unknown. Blocks nest: the outer one sends."""
    if _BLOCK.get() is not None:
        yield
        return
    with app.producer_or_acquire() as producer, producer.batch(max_size=BATCH_COMMANDS) as batch:
        block = _Block(app, [], producer)
        token = _BLOCK.set(block)
        try:
            yield
        except BaseException:
            _BLOCK.reset(token)
            try:
                _send(app, producer, batch, block.events)
            except Exception:  # the block's own error is the one to raise
                log.warning("could not send what a failed block had sent", exc_info=True)
            raise
        _BLOCK.reset(token)
        _send(app, producer, batch, block.events)


def _send(app: Celery, producer: Producer, batch: Any, events: list[dict[str, Any]]) -> None:
    """The block's events into its batch (one message), then the batch to the broker."""
    if events:
        d = app.amqp._event_dispatcher  # Celery's own for task-sent
        try:
            producer.publish(  # type: ignore[no-untyped-call]
                events,
                routing_key="task.multi",
                exchange=d.exchange.name,
                declare=[d.exchange],
                serializer=d.serializer,
                headers=d.headers,
                delivery_mode=d.delivery_mode,
            )
        except Exception:  # not batched (a transport without batches): the tasks went already
            log.warning("could not send %d task-sent events", len(events), exc_info=True)
    try:
        batch.flush()
    except BatchPublishError as exc:
        cause = exc.__cause__
        if isinstance(cause, producer.connection.connection_errors):
            raise OperationalError(
                "the broker was lost while it took a block of sends (some or none may have "
                f"arrived): {type(cause).__name__}: {cause}"
            ) from exc
        raise


def send_group(app: Celery, sig: Signature) -> None:
    """``sig.apply_async()`` (a group of plain tasks) in one round trip to the broker, its
    ``task-sent`` events in one message. A send that fails raises as ``apply_async`` would."""
    with sending_together(app):
        sig.apply_async()
