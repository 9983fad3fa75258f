"""kombu's Redis transport with two repairs: a worker must survive its Redis restarting, and its
Redis refusing writes for a while (out of memory, a replica after a failover, a failed snapshot).

Restart: when the broker connection drops while a task runs, Celery closes the connection, and
closing the channel restores the unacked messages through a new Redis client, built from
connection details the transport has already let go of: the worker dies with "Unrecoverable
error: AttributeError: 'NoneType' object has no attribute 'hostname'" (celery/kombu#970, #582).
This channel keeps those details from its start.

Refused writes: kombu counts redis-py's OutOfMemoryError and ReadOnlyError among the channel
errors (any ResponseError), which Celery's consumer does not retry: the first ack Redis refuses
with "OOM command not allowed when used memory > 'maxmemory'" stops the worker ("Unrecoverable
error: server:OutOfMemoryError"). This transport counts those refusals as connection errors, so
Celery reconnects with its own backoff; while refusals last, a new channel is made only once
Redis takes a write again.
A message taken off a queue whose unacked record Redis refused is held here and given back to
its queue, an ack Redis refused is written later, both once Redis takes writes again.
Settings point Celery at this transport (``broker_transport``) for redis:// and rediss://, and at
its Sentinel variant (the same repairs on kombu's SentinelChannel) for sentinel:// brokers."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from redis import exceptions as redis_errors

from beatflow import keys

logger = logging.getLogger(__name__)

# Refusals that end by themselves or by a reconnect: memory freed (OOM), a replica promoted or
# the client sent to the new primary (READONLY), a snapshot that succeeds again (MISCONF), a
# replica that catches up (NOREPLICAS). Not here, as retrying would only hide them: a wrong
# password or ACL (NOAUTH, WRONGPASS, NOPERM), a bug (WRONGTYPE, ERR syntax), a busy script.
_REFUSED_CLASSES = (redis_errors.OutOfMemoryError, redis_errors.ReadOnlyError)
_REFUSED_CODES = re.compile(r"(?:^|caused error: )(?:MISCONF|NOREPLICAS) ")


class WritesRefusedError(redis_errors.ConnectionError):
    """Raised when the broker Redis refuses writes for a while; Celery retries it as a lost
    connection. ``__cause__`` is redis-py's error."""


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing writes for a while, not a lasting error."""
    if isinstance(exc, (WritesRefusedError, *_REFUSED_CLASSES)):
        return True
    return isinstance(exc, redis_errors.ResponseError) and bool(_REFUSED_CODES.search(str(exc)))


@dataclass
class _Undone:
    """What refused writes left undone on one broker: messages taken off a queue and not
    recorded as unacked (payload, exchange, routing key), acks not written."""

    held: list[tuple[Any, str, str]] = field(default_factory=list)
    acks: set[str] = field(default_factory=set)
    refusing: bool = False


# by broker (host:port/db): outlives the connection (and its channels) Celery replaces on
# reconnecting; a forked pool process starts without it, or it would give held messages back twice
_UNDONE: dict[str, _Undone] = {}
os.register_at_fork(after_in_child=_UNDONE.clear)


def _broker_name(client: Any, default_port: int = 6379) -> str:
    """host:port/db of a kombu Connection: which Redis (or first Sentinel), no password."""
    if client is None:
        return "?"
    db = str(client.virtual_host or "").strip("/") or "0"
    return f"{client.hostname}:{client.port or default_port}/{db}"


class QoS(kombu_redis.QoS):
    """kombu's ack emulation, which holds what Redis refused instead of losing it."""

    channel: Channel

    def append(self, message: Any, delivery_tag: str) -> None:
        try:
            self.channel.settle()
            super().append(message, delivery_tag)  # type: ignore[no-untyped-call]
            self.channel.accepted()
        except redis_errors.RedisError as exc:
            if not is_refusal(exc):
                raise
            # BRPOP took it off its queue; only this process has it now
            info = message.delivery_info
            self.channel.undone.held.append((message._raw, info["exchange"], info["routing_key"]))
            raise self.channel.refused(exc) from exc

    def ack(self, delivery_tag: str) -> None:
        try:
            self.channel.settle()
            self._remove_from_indices(delivery_tag).execute()  # type: ignore[no-untyped-call]
            self.channel.accepted()
        except redis_errors.RedisError as exc:
            if not is_refusal(exc):
                raise
            # written once Redis takes writes; if this process dies first, the message comes
            # back after the visibility timeout and beatflow's claim sees its task run done
            self.channel.undone.acks.add(delivery_tag)
            self.channel.refused(exc)
        virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]

    def restore_unacked(self, client: Any = None) -> None:
        """Closing the channel gives in-flight messages back; refused, that would stop the close
        halfway (its clients left open). Their unacked records stay: the ack of a task that
        finishes removes its record, the visibility timeout restores the rest."""
        try:
            super().restore_unacked(client)  # type: ignore[no-untyped-call]
        except redis_errors.RedisError as exc:
            if not is_refusal(exc):
                raise
            self.channel.refused(exc)
            self._delivered.clear()

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        try:
            self.channel.settle()  # every unacked_restore_interval: writes what waits
            super().restore_visible(*args, **kwargs)  # type: ignore[no-untyped-call]
        except redis_errors.RedisError as exc:
            if not is_refusal(exc):
                raise
            self.channel.refused(exc)  # the next sweep tries again


class Channel(kombu_redis.Channel):
    """The Redis channel, able to build a client after its transport dropped its Connection;
    after a refusal, made only once Redis takes writes again."""

    QoS = QoS
    # kombu batches publishes (Producer.batch) only when redis-py would not replay a pipeline
    # on a timeout, as ``retry_on_timeout`` (set here) does: a replay delivers twice. It does
    # the same to a single publish, and beatflow's batched sends (its canvases) are made to be
    # delivered twice: every task run is claimed by its dedupe key.
    supports_batch_publish = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._beatflow_client = self.connection.client  # the kombu Connection: URL, host, ssl
        self._beatflow_broker = self.broker_name()
        undone = self.undone
        if not (undone.refusing or undone.held or undone.acks):
            return  # no refusal met: a channel as kombu makes it, no extra write
        try:
            self.client.set(keys.BROKER_PROBE, "1", px=60_000)
            self.settle()
            self.accepted()
        except redis_errors.RedisError as exc:
            if not is_refusal(exc):
                raise
            with contextlib.suppress(Exception):
                self.close()  # type: ignore[no-untyped-call]
            # raised while connecting: kombu's ensure_connection retries it with backoff
            raise self.refused(exc) from exc

    def broker_name(self) -> str:
        """Which broker, in logs and as the key of what refusals left undone."""
        return _broker_name(self._beatflow_client)

    @property
    def undone(self) -> _Undone:
        # looked up on every message and ack: built only the first time
        found = _UNDONE.get(self._beatflow_broker)
        if found is None:
            found = _UNDONE[self._beatflow_broker] = _Undone()
        return found

    def refused(self, exc: BaseException) -> WritesRefusedError:
        """Log the first refusal of a spell; the error to raise for it."""
        undone = self.undone
        if not undone.refusing:
            undone.refusing = True
            logger.warning(
                "broker Redis %s refuses writes (%s): this process keeps its messages and "
                "retries with backoff until Redis takes writes again",
                self._beatflow_broker,
                exc,
            )
        if isinstance(exc, WritesRefusedError):
            return exc
        return WritesRefusedError(f"broker Redis refuses writes: {exc}")

    def settle(self) -> None:
        """Give held messages back to their queues and write refused acks, in one transaction."""
        undone = self.undone
        if undone.held or undone.acks:
            held, acks = list(undone.held), sorted(undone.acks)
            with self.conn_or_acquire() as client:
                pipe = client.pipeline()
                for tag in acks:
                    self.qos._remove_from_indices(tag, pipe)
                for payload, exchange, routing_key in held:
                    # to the head of the queue (BRPOP pops from the right), marked redelivered
                    self._do_restore_message(payload, exchange, routing_key, pipe, leftmost=False)  # type: ignore[no-untyped-call]
                try:
                    pipe.execute()
                except redis_errors.RedisError as exc:
                    if is_refusal(exc):
                        raise self.refused(exc) from exc
                    raise
            del undone.held[: len(held)]
            undone.acks.difference_update(acks)
            logger.warning(
                "broker Redis %s takes writes again: %d held message(s) given back to their "
                "queues, %d ack(s) written",
                self._beatflow_broker,
                len(held),
                len(acks),
            )
            undone.refusing = False

    def accepted(self) -> None:
        """Redis took a write: end the spell of refusals, if there was one."""
        undone = self.undone
        if undone.refusing:
            undone.refusing = False
            logger.warning("broker Redis %s takes writes again", self._beatflow_broker)

    @contextlib.contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """The client for one command: kombu builds a new redis-py client for every publish,
        ack and unacked record (0.23 ms each here, more than the command's round trip: redis-py
        fills its table of ~170 response callbacks on every build). One client per channel and
        connection pool does the same, as a client holds no connection between commands; a
        pool replaced (after a fork, on close) gets a new one."""
        if client:
            yield client
            return
        pool = self.pool
        cached = self.__dict__.get("_beatflow_sync_client")
        if cached is None or cached.connection_pool is not pool:
            cached = self._beatflow_sync_client = self._create_client()  # type: ignore[no-untyped-call]
        yield cached

    @contextlib.contextmanager
    def _transport_client(self) -> Iterator[None]:
        """The transport's Connection put back for building one client, if it let it go."""
        transport = self.connection
        if transport.client is not None or self._beatflow_client is None:
            yield
            return
        transport.client = self._beatflow_client
        try:
            yield
        finally:
            transport.client = None

    def _connparams(self, asynchronous: bool = False) -> Any:
        with self._transport_client():
            return super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`; Redis refusing writes is a connection
    error (closed, re-established with backoff), not a channel error that stops a worker."""

    Channel = Channel
    supports_batch_publish = True  # see Channel.supports_batch_publish
    connection_errors = (
        *kombu_redis.Transport.connection_errors,
        WritesRefusedError,
        *_REFUSED_CLASSES,
    )


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """:class:`Channel` on kombu's SentinelChannel: the master found through Sentinel (master
    name, sentinel_kwargs from the transport options), with the same repairs."""

    def broker_name(self) -> str:
        sentinel = _broker_name(self._beatflow_client, kombu_redis.SentinelTransport.default_port)
        return f"{getattr(self, 'master_name', '?')} (Sentinel {sentinel})"

    def _sentinel_managed_pool(self, asynchronous: bool = False) -> Any:
        with self._transport_client():  # it reads the Sentinels' list off the Connection
            return super()._sentinel_managed_pool(asynchronous)  # type: ignore[no-untyped-call]


class SentinelTransport(Transport, kombu_redis.SentinelTransport):
    """kombu's Sentinel transport with :class:`SentinelChannel` and the connection errors of
    :class:`Transport`."""

    Channel = SentinelChannel
