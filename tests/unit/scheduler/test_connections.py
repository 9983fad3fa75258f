"""One Redis URL for every client: Sentinel and TLS URLs become the right redis-py, kombu and
RedBeat settings, and bad URLs are refused with the reason (never the password)."""

from __future__ import annotations

import ssl

import pytest

from beatflow import connections
from beatflow.errors import SettingsError
from beatflow.settings import Settings

SENTINEL = "sentinel://:pw@10.0.0.1:26379,10.0.0.2:26380/2?master_name=main&sentinel_password=sp"


def test_a_sentinel_url_names_every_sentinel_the_master_and_both_passwords() -> None:
    ep = connections.parse(SENTINEL)
    assert ep.sentinel and ep.master_name == "main" and ep.db == 2
    assert ep.hosts == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert (ep.password, ep.sentinel_password) == ("pw", "sp")
    # kombu's own list form is read too
    kombu = connections.parse("sentinel://h1:26379;sentinel://h2:26379/1?master_name=m")
    assert kombu.hosts == (("h1", 26379), ("h2", 26379)) and kombu.db == 1
    assert connections.parse("sentinel://h1:26379/0").master_name == "mymaster"


def test_celery_kombu_and_redbeat_get_the_sentinel_pieces() -> None:
    config = Settings(broker_url=SENTINEL).celery_config()
    assert config["broker_url"] == "sentinel://:pw@10.0.0.1:26379/2;sentinel://:pw@10.0.0.2:26380/2"
    assert config["broker_transport_options"]["master_name"] == "main"
    assert config["broker_transport_options"]["sentinel_kwargs"] == {"password": "sp"}
    assert config["result_backend_transport_options"]["master_name"] == "main"
    assert config["redbeat_redis_url"].startswith("redis-sentinel://")
    options = config["redbeat_redis_options"]
    assert options["service_name"] == "main" and options["sentinels"][1] == ["10.0.0.2", 26380]


def test_a_rediss_url_gets_certificate_checks_for_broker_backend_and_redbeat() -> None:
    url = "rediss://:pw@redis.example:6380/0?ssl_ca_certs=/etc/ca.pem"
    config = Settings(broker_url=url).celery_config()
    assert config["broker_url"].endswith("?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required")
    assert config["result_backend"] == config["broker_url"]  # Celery's backend demands it
    expected = {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/etc/ca.pem"}
    assert config["broker_use_ssl"] == expected
    assert config["redis_backend_use_ssl"] == expected
    assert config["redbeat_redis_use_ssl"] == expected
    none = connections.parse("rediss://h:6380/0?ssl_cert_reqs=none")
    assert none.tls == {"ssl_cert_reqs": ssl.CERT_NONE}


def test_a_plain_url_is_passed_through_unchanged() -> None:
    config = Settings(broker_url="redis://:pw@h:6379/3").celery_config()
    assert config["broker_url"] == "redis://:pw@h:6379/3"
    assert config["broker_use_ssl"] is None
    assert "master_name" not in config["broker_transport_options"]
    assert config["redbeat_redis_options"]["socket_timeout"] > 0  # RedBeat's client never hangs


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("sentinel://:secret@h:26379/x?master_name=m", "bad Redis database number 'x'"),
        ("rediss://:secret@h:6380/0?ssl_cert_reqs=maybe", "ssl_cert_reqs='maybe'"),
        ("redis://:secret@h:port/0", "bad port"),
    ],
)
def test_bad_redis_urls_are_refused_with_the_reason_and_no_password(url: str, reason: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"BEATFLOW_BROKER_URL": url})
    assert reason in str(info.value) and "secret" not in str(info.value)
