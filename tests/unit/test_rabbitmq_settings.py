"""RabbitMQ as the broker in Settings: the URLs accepted, BEATFLOW_REDIS_URL required beside
it, and the Celery configuration it gets (no Redis transport repairs, publisher confirms)."""

from __future__ import annotations

import pytest

from beatflow.errors import SettingsError
from beatflow.settings import Settings

REDIS = "redis://127.0.0.1:6379/3"


@pytest.mark.parametrize(
    "url",
    [
        "amqp://guest:guest@127.0.0.1:5672//",
        "amqps://app:pw@rabbit.example:5671/prod",
        "pyamqp://guest:guest@localhost//",
    ],
)
def test_rabbitmq_broker_urls_are_accepted_beside_a_redis_url(url: str) -> None:
    s = Settings.from_env({"BEATFLOW_BROKER_URL": url, "BEATFLOW_REDIS_URL": REDIS})
    assert s.broker_url == url and s.broker_is_amqp
    assert s.effective_redis_url == REDIS
    assert s.effective_result_backend_url == REDIS and s.effective_redbeat_url == REDIS


def test_a_rabbitmq_broker_without_a_redis_url_is_refused_naming_the_variable() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"BEATFLOW_BROKER_URL": "amqp://guest:secretpw@h:5672//"})
    [problem] = caught.value.problems
    assert "BEATFLOW_REDIS_URL" in problem and "is RabbitMQ" in problem
    assert "secretpw" not in problem


def test_the_redis_url_must_be_redis_and_a_bad_amqp_port_is_refused() -> None:
    with pytest.raises(SettingsError, match="BEATFLOW_REDIS_URL=.*expected a Redis URL"):
        Settings.from_env({"BEATFLOW_BROKER_URL": "amqp://h//", "BEATFLOW_REDIS_URL": "amqp://h//"})
    with pytest.raises(SettingsError, match="BEATFLOW_BROKER_URL=.*bad port"):
        Settings.from_env({"BEATFLOW_BROKER_URL": "amqp://h:port//", "BEATFLOW_REDIS_URL": REDIS})
    with pytest.raises(SettingsError, match="BEATFLOW_BROKER_URL=.*or a RabbitMQ URL"):
        Settings.from_env({"BEATFLOW_BROKER_URL": "kafka://h:9092"})


def test_a_redis_broker_keeps_its_state_in_the_broker_redis_unless_told_otherwise() -> None:
    s = Settings.from_env({"BEATFLOW_BROKER_URL": REDIS})
    assert not s.broker_is_amqp and s.effective_redis_url == REDIS
    other = "redis://127.0.0.1:6379/5"
    s = Settings.from_env({"BEATFLOW_BROKER_URL": REDIS, "BEATFLOW_REDIS_URL": other})
    assert s.effective_redbeat_url == other and s.effective_result_backend_url == other


def test_celery_gets_kombus_amqp_transport_with_publisher_confirms_and_redis_results() -> None:
    url = "amqp://guest:guest@127.0.0.1:5672//"
    config = Settings.from_env(
        {"BEATFLOW_BROKER_URL": url, "BEATFLOW_REDIS_URL": REDIS}
    ).celery_config()
    assert config["broker_url"] == url
    assert config.get("broker_transport") is None  # kombu's own, chosen by the scheme
    assert config["broker_transport_options"]["confirm_publish"] is True
    assert "visibility_timeout" not in config["broker_transport_options"]  # Redis-only
    assert config["result_backend"] == REDIS
    assert config["redbeat_redis_url"] == REDIS


def test_queues_get_priorities_or_are_quorum_queues_without_them() -> None:
    env = {"BEATFLOW_BROKER_URL": "amqp://h//", "BEATFLOW_REDIS_URL": REDIS}
    config = Settings.from_env(env).celery_config()
    assert config["task_queue_max_priority"] == 10
    assert config["task_default_queue_type"] == "classic"
    config = Settings.from_env({**env, "BEATFLOW_RABBITMQ_MAX_PRIORITY": "0"}).celery_config()
    assert config["task_queue_max_priority"] is None
    quorum = Settings.from_env({**env, "BEATFLOW_RABBITMQ_QUORUM_QUEUES": "true"}).celery_config()
    assert quorum["task_default_queue_type"] == quorum["task_create_missing_queue_type"] == "quorum"
    assert quorum["task_queue_max_priority"] is None and quorum["worker_detect_quorum_queues"]
    # on a Redis broker none of this is said: kombu's Redis priorities stay as they were
    assert "task_queue_max_priority" not in Settings.from_env({}).celery_config()


def test_the_visibility_timeout_bounds_the_time_limit_on_redis_only() -> None:
    long_tasks = {"BEATFLOW_TASK_SOFT_TIME_LIMIT": "7000", "BEATFLOW_TASK_TIME_LIMIT": "7200"}
    with pytest.raises(SettingsError, match="BEATFLOW_VISIBILITY_TIMEOUT=3600 must exceed"):
        Settings.from_env({"BEATFLOW_BROKER_URL": REDIS, **long_tasks})
    env = {"BEATFLOW_BROKER_URL": "amqp://h//", "BEATFLOW_REDIS_URL": REDIS, **long_tasks}
    assert Settings.from_env(env).task_time_limit == 7200


def test_an_app_of_quorum_queues_gets_no_priority_argument_for_them() -> None:
    import types

    from celery import Celery

    from beatflow import init_app

    settings = Settings(broker_url="amqp://h//", redis_url=REDIS)
    module = types.ModuleType("quorum_celeryconfig")
    module.task_default_queue_type = "quorum"  # type: ignore[attr-defined]
    quorum = Celery("proj", set_as_current=False)
    quorum.config_from_object(module)
    classic = Celery("other", set_as_current=False)
    try:
        init_app(quorum, settings, load_dags=False)
        init_app(classic, settings, load_dags=False)
        assert quorum.conf.task_default_queue_type == "quorum"  # the app's own, kept
        assert quorum.conf.task_queue_max_priority is None
        assert classic.conf.task_queue_max_priority == 10
    finally:
        quorum.close()
        classic.close()
