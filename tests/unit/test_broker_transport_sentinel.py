"""beatflow's Sentinel broker transport: the refusal handling of the plain one, on kombu's
SentinelChannel, chosen for sentinel:// broker URLs with their master name and passwords."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kombu import Connection
from kombu.transport import redis as kombu_redis
from redis import exceptions as e

from beatflow import broker_transport as bt
from beatflow.app import create_app
from beatflow.settings import Settings

URL = "sentinel://:pw@10.0.0.1:26379,10.0.0.2:26380/2?master_name=main&sentinel_password=sp"


@pytest.mark.parametrize("exc", [e.OutOfMemoryError("oom"), e.ReadOnlyError("readonly")])
def test_a_refusal_is_a_connection_error_of_the_sentinel_transport(exc: Exception) -> None:
    assert isinstance(exc, bt.SentinelTransport.connection_errors)
    assert issubclass(bt.WritesRefusedError, bt.SentinelTransport.connection_errors)
    assert e.ResponseError not in bt.SentinelTransport.connection_errors


def test_a_lasting_error_stays_a_channel_error_of_the_sentinel_transport() -> None:
    wrongtype = e.ResponseError("WRONGTYPE Operation against a key holding the wrong kind")
    assert not isinstance(wrongtype, bt.SentinelTransport.connection_errors)
    assert isinstance(wrongtype, bt.SentinelTransport.channel_errors)


def test_the_sentinel_transport_is_kombus_with_beatflows_channel_and_qos() -> None:
    assert issubclass(bt.SentinelTransport, kombu_redis.SentinelTransport)
    assert issubclass(bt.SentinelChannel, kombu_redis.SentinelChannel)
    assert issubclass(bt.SentinelChannel, bt.Channel)  # one refusal handling for both
    assert bt.SentinelTransport.Channel is bt.SentinelChannel
    assert bt.SentinelChannel.QoS is bt.QoS
    assert bt.SentinelTransport.default_port == 26379


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("redis://127.0.0.1:6379/0", "beatflow.broker_transport:Transport"),
        ("rediss://127.0.0.1:6380/0", "beatflow.broker_transport:Transport"),
        (URL, "beatflow.broker_transport:SentinelTransport"),
        ("redis-sentinel://h:26379/0?master_name=m", "beatflow.broker_transport:SentinelTransport"),
    ],
)
def test_settings_pick_beatflows_transport_by_the_broker_url_scheme(
    url: str, transport: str
) -> None:
    config = Settings.from_env({"BEATFLOW_BROKER_URL": url}).celery_config()
    assert config["broker_transport"] == transport


def test_a_sentinel_broker_url_from_a_file_keeps_its_master_name_and_passwords(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "broker_url"
    secret.write_text(URL + "\n")
    config = Settings.from_env({"BEATFLOW_BROKER_URL_FILE": str(secret)}).celery_config()
    assert config["broker_transport"] == "beatflow.broker_transport:SentinelTransport"
    assert config["broker_url"] == (
        "sentinel://:pw@10.0.0.1:26379/2;sentinel://:pw@10.0.0.2:26380/2"
    )  # the database on every Sentinel: kombu and Celery's backend read the first one's
    options = config["broker_transport_options"]
    assert options["master_name"] == "main"
    assert options["sentinel_kwargs"] == {"password": "sp"}


@pytest.fixture
def channel(monkeypatch: pytest.MonkeyPatch) -> Iterator[bt.SentinelChannel]:
    """A channel of the Sentinel transport as Celery configures it, without a network: the
    ping kombu sends on making a channel is answered here."""
    monkeypatch.setattr(redis.Redis, "ping", lambda self, **kw: True)
    config = Settings.from_env({"BEATFLOW_BROKER_URL": URL}).celery_config()
    conn = Connection(
        config["broker_url"],
        transport=config["broker_transport"],
        transport_options=config["broker_transport_options"],
    )
    chan = conn.default_channel
    assert isinstance(chan, bt.SentinelChannel)
    yield chan
    conn.release()


def test_the_sentinel_channel_finds_the_master_with_the_urls_names_and_passwords(
    channel: bt.SentinelChannel,
) -> None:
    pool = channel.client.connection_pool
    assert pool.service_name == "main"
    assert pool.connection_kwargs["password"] == "pw"  # the master's
    manager = pool.sentinel_manager
    sentinels = [s.connection_pool.connection_kwargs for s in manager.sentinels]
    assert [(s["host"], s["port"]) for s in sentinels] == [("10.0.0.1", 26379), ("10.0.0.2", 26380)]
    assert {s["password"] for s in sentinels} == {"sp"}  # the Sentinels' own
    assert pool.connection_kwargs["db"] == 2  # the URL's database, not the first Sentinel's 0
    assert channel.broker_name() == "main (Sentinel 10.0.0.1:26379/2)"


def test_the_sentinel_channel_builds_a_client_after_its_transport_let_the_connection_go(
    channel: bt.SentinelChannel,
) -> None:
    # Celery closing the connection while a task runs: the transport drops its Connection,
    # then the channel's close restores unacked messages through a new client (kombu#970)
    transport = channel.connection
    transport.client = None
    pool = channel._sentinel_managed_pool()
    assert pool.service_name == "main"
    assert transport.client is None  # put back only for building that client


def test_the_result_backend_on_a_sentinel_url_uses_its_database_and_password() -> None:
    app = create_app(Settings(broker_url=URL))
    try:
        assert app.backend.connparams["db"] == 2
        assert app.backend.connparams["password"] == "pw"
    finally:
        app.close()
