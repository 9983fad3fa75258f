"""kombu's Redis transport with one repair: a worker must survive its Redis restarting.

When the broker connection drops while a task runs, Celery closes the connection, and closing
the channel restores the unacked messages through a new Redis client, built from connection
details the transport has already let go of: the worker dies with "Unrecoverable error:
AttributeError: 'NoneType' object has no attribute 'hostname'" (celery/kombu#970, #582). This
channel keeps those details from its start. Settings point Celery at it (``broker_transport``)
for redis:// and rediss:// brokers."""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    """The Redis channel, able to build a client after its transport dropped its Connection."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._beatflow_client = self.connection.client  # the kombu Connection: URL, host, ssl

    def _connparams(self, asynchronous: bool = False) -> Any:
        transport = self.connection
        if transport.client is not None or self._beatflow_client is None:
            return super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]
        transport.client = self._beatflow_client  # only for the parameters of this client
        try:
            return super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]
        finally:
            transport.client = None


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel
