"""What the exporter reads from RabbitMQ: each queue's ready messages and consumers, from a
passive ``queue.declare`` over AMQP (``declare-ok`` carries ``message_count`` and
``consumer_count``). No management plugin is needed, so the exporter needs nothing the workers do
not: the broker URL and its credentials (the plugin is often off, and its HTTP port is one more
listener and secret to run). A priority or quorum queue is one queue on RabbitMQ, so its count
already includes every priority. What AMQP does not say is how many messages are delivered and
not acknowledged yet; the exporter counts those from worker events
(:meth:`beatflow.observability.celery_events.EventHandler.in_flight`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from celery import Celery
from kombu.connection import Connection

from beatflow.connections import is_amqp

log = logging.getLogger(__name__)

NOT_FOUND = 404  # AMQP reply code of a passive declare on a queue that does not exist

__all__ = ["NOT_FOUND", "QueueReader", "QueueReading", "is_amqp"]


@dataclass(frozen=True, slots=True)
class QueueReading:
    """One queue as RabbitMQ reports it: messages ready for delivery, and consumers."""

    messages: int = 0
    consumers: int = 0


class QueueReader:
    """Passive declares over one connection kept across polls (reopened after an error)."""

    def __init__(self, app: Celery, *, timeout: float = 5.0) -> None:
        self.app = app
        self.timeout = timeout
        self._conn: Connection | None = None

    def read(self, queues: Sequence[str]) -> dict[str, QueueReading]:
        """The reading of every queue; a queue nobody declared yet reads as empty."""
        conn = self._connection()
        try:
            channel: Any = conn.channel()  # type: ignore[no-untyped-call]
            out: dict[str, QueueReading] = {}
            for queue in queues:
                try:
                    _, messages, consumers = channel.queue_declare(queue=queue, passive=True)
                except conn.channel_errors as exc:
                    if getattr(exc, "code", None) != NOT_FOUND:
                        raise
                    # RabbitMQ closed the channel with 404: open another one
                    out[queue] = QueueReading()
                    channel = conn.channel()  # type: ignore[no-untyped-call]
                    continue
                out[queue] = QueueReading(int(messages), int(consumers))
            channel.close()
            return out
        except Exception:
            self.close()
            raise

    def _connection(self) -> Connection:
        if self._conn is None:
            conn = self.app.connection_for_read()
            conn.connect_timeout = self.timeout
            conn.ensure_connection(max_retries=1, timeout=self.timeout)
            self._conn = conn
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.release()  # type: ignore[no-untyped-call]
            except Exception:  # closing a broken connection may fail too
                log.debug("closing the RabbitMQ connection failed", exc_info=True)
