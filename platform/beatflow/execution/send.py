"""Sending many task messages with their ``task-sent`` events in one event message.

Celery publishes a ``task-sent`` event beside every task message it sends (the app sets
``task_send_sent_event``, which Flower and celery-exporter read). Each is a message of its own:
about 250–280 µs of the sender's CPU per task here (bench/bench_send_cost.py, "send_task" against
"no task-sent event"), which for a ``.map()`` lands in the worker that expands it, and for the
runs of a beat's fire batch in the worker that dispatches them. Celery's own dispatcher can buffer
events and send them as a list in one ``<group>.multi`` message, and every Celery event receiver
(Flower's, celery-exporter's, beatflow's exporter) takes a list body as that many events.

In a ``sending_together`` block, the app's event dispatcher (``BatchingDispatcher``, set by
``create_app`` as the app's ``events.Dispatcher``) keeps the ``task-sent`` events of whatever the
block sends — tasks, groups, chains, chords: Celery's canvas code is left to publish as it
always does, since apply options such as a producer would be copied into a chord's body and
serialised with it — and the block ends by publishing them in one message. An app built
otherwise sends its events one by one, as Celery does.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
from collections.abc import Iterator
from typing import Any

from celery import Celery
from celery.app.events import Events
from celery.canvas import Signature
from celery.events.dispatcher import EventDispatcher
from celery.events.event import Event
from celery.utils.time import utcoffset

log = logging.getLogger(__name__)

_KEPT: contextvars.ContextVar[tuple[Celery, list[dict[str, Any]]] | None] = contextvars.ContextVar(
    "beatflow_kept_task_sent_events", default=None
)


class BatchingDispatcher(EventDispatcher):  # type: ignore[misc]
    """Celery's event dispatcher, which keeps the ``task-sent`` events its app publishes in a
    ``sending_together`` block of this thread, stamped as Celery stamps them (hostname, clock,
    utcoffset; the pid is the sending process's, where Celery's cached dispatcher may carry the
    pid it was made in)."""

    def publish(self, type: str, fields: dict[str, Any], producer: Any, blind: bool = False,
                Event: Any = Event, **kwargs: Any) -> Any:  # fmt: skip
        kept = _KEPT.get()
        if kept is None or type != "task-sent" or kept[0] is not self.app:
            return super().publish(type, fields, producer, blind=blind, Event=Event, **kwargs)
        clock = None if blind else self.clock.forward()
        kept[1].append(
            Event(type, hostname=self.hostname, utcoffset=utcoffset(), pid=os.getpid(),
                  clock=clock, **fields)
        )  # fmt: skip
        return None


class BatchingEvents(Events):  # type: ignore[misc]
    """The app's ``events``, whose Dispatcher is ``BatchingDispatcher``."""

    dispatcher_cls = f"{__name__}:BatchingDispatcher"


@contextlib.contextmanager
def sending_together(app: Celery) -> Iterator[None]:
    """A block whose sends' ``task-sent`` events go in one ``task.multi`` message when it ends
    (also when a send in it failed: the events of what went are sent). Blocks nest: the outer
    one sends them."""
    if _KEPT.get() is not None:
        yield
        return
    kept: list[dict[str, Any]] = []
    token = _KEPT.set((app, kept))
    try:
        yield
    finally:
        _KEPT.reset(token)
        _flush(app, kept)


def _flush(app: Celery, events: list[dict[str, Any]]) -> None:
    if not events:
        return
    d = app.amqp._event_dispatcher  # Celery's own for task-sent
    try:
        with app.producer_or_acquire() as producer:
            producer.publish(
                events,
                routing_key="task.multi",
                exchange=d.exchange.name,
                declare=[d.exchange],
                serializer=d.serializer,
                headers=d.headers,
                delivery_mode=d.delivery_mode,
            )
    except Exception:  # the tasks went; their events are for monitoring only
        log.warning("could not send %d task-sent events", len(events), exc_info=True)


def send_group(app: Celery, sig: Signature) -> None:
    """``sig.apply_async()`` (a group of plain tasks), its ``task-sent`` events in one message.
    A send that fails raises as ``apply_async`` would; the events of what went are sent."""
    with sending_together(app):
        sig.apply_async()  # a group sends its tasks through one producer of its own
