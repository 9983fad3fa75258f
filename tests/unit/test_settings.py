"""Settings: BEATFLOW_* variables parse into one frozen object; every bad value is reported at
once with its variable, its (masked) value and the expected form; secrets never print."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from beatflow.cli import main
from beatflow.errors import SettingsError
from beatflow.settings import Settings, mask_url

SECRET = "hunter2-s3cret"


def test_an_empty_environment_gives_the_documented_defaults() -> None:
    settings = Settings.from_env({})

    assert settings == Settings()
    assert settings.broker_url == "redis://127.0.0.1:6379/0"
    assert settings.database_url.startswith("sqlite:///.beatflow/")
    assert settings.queues == ("default",)
    assert settings.effective_result_backend_url == settings.broker_url
    assert settings.effective_redbeat_url == settings.broker_url


def test_every_kind_of_value_parses_from_its_variable() -> None:
    settings = Settings.from_env(
        {
            "BEATFLOW_BROKER_URL": f"rediss://app:{SECRET}@redis.example:6380/2",
            "BEATFLOW_RESULT_BACKEND_URL": "redis://127.0.0.1:6379/3",
            "BEATFLOW_DATABASE_URL": "postgres://u:pw@db.example/beatflow",
            "BEATFLOW_DAGS_FOLDER": "/srv/dags",
            "BEATFLOW_QUEUES": "default, etl ,reports.daily",
            "BEATFLOW_VISIBILITY_TIMEOUT": "7_200",
            "BEATFLOW_BEAT_LOCK_TIMEOUT": "10",
            "BEATFLOW_BEAT_RENEW_INTERVAL": "2.5",
            "BEATFLOW_WORKER_DISABLE_PREFETCH": "yes",
            "BEATFLOW_FLOWER_USER": "ops",
            "BEATFLOW_FLOWER_PASSWORD": SECRET,
            "BEATFLOW_LOG_FORMAT": "JSON",
            "BEATFLOW_LOG_LEVEL": "debug",
        }
    )

    assert settings.broker_url == f"rediss://app:{SECRET}@redis.example:6380/2"
    assert settings.effective_result_backend_url == "redis://127.0.0.1:6379/3"
    # Heroku-style postgres:// becomes the psycopg 3 driver SQLAlchemy needs
    assert settings.database_url == "postgresql+psycopg://u:pw@db.example/beatflow"
    assert settings.queues == ("default", "etl", "reports.daily")
    assert settings.default_queue == "default"
    assert settings.visibility_timeout == 7200
    assert (settings.beat_lock_timeout, settings.beat_renew_interval) == (10.0, 2.5)
    assert settings.worker_disable_prefetch is True
    assert (settings.log_format, settings.log_level) == ("json", "DEBUG")


@pytest.mark.parametrize(
    "url",
    [
        "redis://:pw@127.0.0.1:6379/0",
        "rediss://user:pw@host:6380/0?ssl_cert_reqs=required",
        "sentinel://:pw@s1:26379;sentinel://:pw@s2:26379;sentinel://:pw@s3:26379",
        "redis-sentinel://:pw@s1:26379,s2:26379/0",
    ],
)
def test_redis_broker_urls_in_plain_tls_and_sentinel_form_are_accepted(url: str) -> None:
    assert Settings.from_env({"BEATFLOW_BROKER_URL": url}).broker_url == url


def test_a_redis_url_scheme_the_clients_cannot_read_is_refused_from_the_env_and_directly() -> None:
    # redis+socket:// was once accepted here, then failed in celery_config (connections.parse)
    url = "redis+socket:///tmp/redis.sock"
    with pytest.raises(SettingsError, match="BEATFLOW_BROKER_URL=.*expected a Redis URL"):
        Settings.from_env({"BEATFLOW_BROKER_URL": url})
    [problem] = Settings(broker_url=url).problems()
    assert problem.startswith("BEATFLOW_BROKER_URL=") and "expected a Redis URL" in problem


def test_a_bad_environment_is_one_error_that_lists_every_bad_variable() -> None:
    env = {
        "BEATFLOW_BROKER_URL": f"http://app:{SECRET}@redis.example/0",
        "BEATFLOW_DATABASE_URL": "mysql://u:pw@db/x",
        "BEATFLOW_VISIBILITY_TIMEOUT": "soon",
        "BEATFLOW_FLOWER_PORT": "70000",
        "BEATFLOW_QUEUES": "a b",
        "BEATFLOW_LOG_LEVEL": "LOUD",
        "BEATFLOW_BEAT_LOCK_TIMEOUT": "nan",
        "BEATFLOW_WORKER_DISABLE_PREFETCH": "maybe",
    }
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)

    error = caught.value
    assert len(error.problems) == len(env)
    for variable in env:
        assert sum(p.startswith(variable + "=") for p in error.problems) == 1, variable
    message = str(error)
    assert f"({len(env)})" in message
    assert SECRET not in message and "app:****@" in message
    assert "expected a Redis URL" in message
    assert "expected a whole number from 1 to 65535" in message
    assert "expected DEBUG, INFO, WARNING, ERROR or CRITICAL" in message
    assert "expected true or false" in message


def test_inconsistent_values_are_reported_together_naming_both_variables() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(
            {
                "BEATFLOW_TASK_SOFT_TIME_LIMIT": "400",
                "BEATFLOW_TASK_TIME_LIMIT": "300",
                "BEATFLOW_VISIBILITY_TIMEOUT": "200",
                "BEATFLOW_BEAT_RENEW_INTERVAL": "2",
                "BEATFLOW_BEAT_LOCK_TIMEOUT": "3",
            }
        )

    problems = caught.value.problems
    assert len(problems) == 3
    soft, visibility, renew = problems
    assert "BEATFLOW_TASK_SOFT_TIME_LIMIT=400" in soft and "BEATFLOW_TASK_TIME_LIMIT=300" in soft
    assert "BEATFLOW_VISIBILITY_TIMEOUT=200" in visibility and "redelivers" in visibility
    assert "BEATFLOW_BEAT_RENEW_INTERVAL" in renew and "BEATFLOW_BEAT_LOCK_TIMEOUT" in renew


def test_replace_validates_the_new_combination() -> None:
    with pytest.raises(SettingsError, match="BEATFLOW_TASK_SOFT_TIME_LIMIT"):
        Settings().replace(task_soft_time_limit=1000)
    assert Settings().replace(task_time_limit=400).task_time_limit == 400


def test_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().broker_url = "redis://elsewhere/0"  # type: ignore[misc]


def test_unknown_beatflow_variables_are_kept_aside_and_test_variables_ignored() -> None:
    settings = Settings.from_env(
        {"BEATFLOW_BROKR_URL": "redis://x/0", "BEATFLOW_TEST_REDIS_URL": "redis://y/0"}
    )
    assert dict(settings.extra) == {"BEATFLOW_BROKR_URL": "redis://x/0"}


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        (f"redis://:{SECRET}@h:6379/0", "redis://:****@h:6379/0"),
        (f"rediss://user:{SECRET}@h:6380/1", "rediss://user:****@h:6380/1"),
        (
            f"sentinel://:{SECRET}@s1:26379;sentinel://:{SECRET}@s2:26379",
            "sentinel://:****@s1:26379;sentinel://:****@s2:26379",
        ),
        (
            f"redis-sentinel://:{SECRET}@s1:26379,s2:26379/0",
            "redis-sentinel://:****@s1:26379,s2:26379/0",
        ),
        (f"redis://h:6379/0?password={SECRET}&db=1", "redis://h:6379/0?password=****&db=1"),
        (f"postgresql+psycopg://u:{SECRET}@db:5432/x", "postgresql+psycopg://u:****@db:5432/x"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("sqlite:///.beatflow/beatflow.db", "sqlite:///.beatflow/beatflow.db"),
    ],
)
def test_mask_url_hides_every_password_form(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def _secret_settings_env() -> dict[str, str]:
    return {
        "BEATFLOW_BROKER_URL": f"sentinel://:{SECRET}@s1:26379;sentinel://:{SECRET}@s2:26379",
        "BEATFLOW_DATABASE_URL": f"postgresql+psycopg://beatflow:{SECRET}@db:5432/beatflow",
        "BEATFLOW_FLOWER_PASSWORD": SECRET,
    }


def test_repr_masks_every_secret() -> None:
    text = repr(Settings.from_env(_secret_settings_env()))

    assert SECRET not in text
    assert "flower_password='****'" in text
    assert "beatflow:****@db" in text


def test_config_show_prints_effective_settings_with_secrets_masked() -> None:
    env = {**_secret_settings_env(), "BEATFLOW_QUEUES": "default,etl"}

    result = CliRunner().invoke(main, ["config", "show"], env=env)

    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    lines = dict((line.split(maxsplit=1) + [""])[:2] for line in result.output.splitlines())
    assert lines["BEATFLOW_FLOWER_PASSWORD"] == "****"
    assert lines["BEATFLOW_QUEUES"] == "default,etl"
    assert lines["BEATFLOW_DATABASE_URL"] == "postgresql+psycopg://beatflow:****@db:5432/beatflow"


def test_config_show_json_is_machine_readable_and_masked() -> None:
    result = CliRunner().invoke(main, ["config", "show", "--json"], env=_secret_settings_env())

    assert result.exit_code == 0, result.output
    values = json.loads(result.output)
    assert values["BEATFLOW_FLOWER_PASSWORD"] == "****"
    assert SECRET not in result.output


def test_config_show_with_a_bad_environment_lists_every_problem_and_fails() -> None:
    env = {
        "BEATFLOW_BROKER_URL": f"kafka://u:{SECRET}@mq/",
        "BEATFLOW_FLOWER_PORT": "zero",
    }

    result = CliRunner().invoke(main, ["config", "show"], env=env)

    assert result.exit_code != 0
    assert "BEATFLOW_BROKER_URL" in result.output and "BEATFLOW_FLOWER_PORT" in result.output
    assert SECRET not in result.output


def test_celery_config_is_json_only_with_reliable_delivery() -> None:
    config = Settings(visibility_timeout=4000).celery_config()

    assert config["accept_content"] == ["json"] and config["task_serializer"] == "json"
    assert config["task_acks_late"] and config["task_reject_on_worker_lost"]
    assert config["worker_prefetch_multiplier"] == 1
    assert config["broker_transport_options"]["visibility_timeout"] == 4000
    assert config["result_backend_transport_options"]["visibility_timeout"] == 4000
    assert config["worker_send_task_events"] and config["timezone"] == "UTC"
    assert 0 < config["result_expires"] <= 7 * 86_400
