"""beatflow's broker transport keeps one redis-py client per channel: kombu builds a new one for
every publish, ack and unacked record, and building one costs more than the command it sends."""

from __future__ import annotations

from kombu import Connection, Exchange, Producer, Queue

from beatflow.broker_transport import Channel


def _acquired(channel: Channel) -> object:
    with channel.conn_or_acquire() as client:
        return client


def test_a_channel_sends_every_command_through_one_client_until_its_pool_is_replaced(
    redis_url: str,
) -> None:
    queue = Queue("bf-clients", Exchange("bf-clients"), routing_key="bf-clients")
    with Connection(redis_url, transport="beatflow.broker_transport:Transport") as conn:
        channel = conn.channel()
        assert isinstance(channel, Channel)
        producer = Producer(channel, exchange=queue.exchange, routing_key="bf-clients")
        queue(channel).declare()
        first = _acquired(channel)
        for i in range(5):
            producer.publish({"n": i}, serializer="json")
        assert _acquired(channel) is first
        got = [queue(channel).get(no_ack=False) for _ in range(5)]
        assert [m.decode()["n"] for m in got if m is not None] == [0, 1, 2, 3, 4]
        for message in got:
            assert message is not None
            message.ack()
        assert _acquired(channel) is first

        channel._disconnect_pools()  # what a fork or a close does: the pool is replaced
        second = _acquired(channel)
        assert second is not first
        assert second.connection_pool is channel.pool  # type: ignore[attr-defined]
        producer.publish({"n": 5}, serializer="json")
        again = queue(channel).get(no_ack=True)
        assert again is not None and again.decode() == {"n": 5}
        channel.close()
