"""Celery settings passed through BEATFLOW_CELERY_<SETTING> (JSON values), the refused ones with
a message naming the variable, and URL passwords masked in the config Celery shows."""

from __future__ import annotations

import pytest
from celery import Celery
from celery.app import utils as celery_utils

from beatflow.app import create_app
from beatflow.errors import SettingsError
from beatflow.settings import Settings


def test_celery_settings_pass_through_with_json_values() -> None:
    settings = Settings.from_env(
        {
            "BEATFLOW_CELERY_WORKER_MAX_TASKS_PER_CHILD": "100",
            "BEATFLOW_CELERY_BROKER_POOL_LIMIT": "4",
            "BEATFLOW_CELERY_TASK_DEFAULT_RATE_LIMIT": "10/s",  # not JSON: a string
            "BEATFLOW_CELERY_TASK_ROUTES": '{"billing.*": {"queue": "billing"}}',
        }
    )
    config = settings.celery_config()
    assert config["worker_max_tasks_per_child"] == 100
    assert config["broker_pool_limit"] == 4
    assert config["task_default_rate_limit"] == "10/s"
    assert config["task_routes"] == {"billing.*": {"queue": "billing"}}
    assert config["accept_content"] == ["json"]  # untouched
    assert settings.masked()["BEATFLOW_CELERY_WORKER_MAX_TASKS_PER_CHILD"] == 100
    assert not settings.extra  # not reported as unknown variables


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("BEATFLOW_CELERY_TASK_SERIALIZER", '"pickle"', "JSON only"),
        ("BEATFLOW_CELERY_ACCEPT_CONTENT", '["json", "pickle"]', "JSON only"),
        ("BEATFLOW_CELERY_TASK_ACKS_LATE", "false", "acks_late"),
        ("BEATFLOW_CELERY_BROKER_TRANSPORT_OPTIONS", '{"visibility_timeout": 60}', "VISIBILITY"),
        ("BEATFLOW_CELERY_RESULT_BACKEND", '"redis://x/1"', "BEATFLOW_RESULT_BACKEND_URL"),
        ("BEATFLOW_CELERY_REDBEAT_REDIS_URL", '"redis://x/1"', "beat's settings"),
        ("BEATFLOW_CELERY_WORKER_MAX_TASK_PER_CHILD", "5", "WORKER_MAX_TASKS_PER_CHILD"),
    ],
)
def test_unsafe_or_unknown_celery_settings_are_refused_naming_the_variable(
    variable: str, value: str, says: str
) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({variable: value})
    (problem,) = info.value.problems
    assert problem.startswith(variable + ":")
    assert says in problem


def test_every_url_in_the_config_celery_shows_has_its_password_masked(tmp_path: object) -> None:
    settings = Settings(
        broker_url="redis://:brokerpw@127.0.0.1:6379/0",
        redbeat_url="redis://:beatpw@127.0.0.1:6379/2",
        database_url="sqlite:///:memory:",
        celery_overrides={"task_routes": {"x": {"queue": "q"}}},
    )
    app: Celery = create_app(settings, load_dags=False)
    try:
        shown = repr(app.conf.table(with_defaults=True, censored=True))
        raw = repr(celery_utils.filter_hidden_settings(dict(app.conf)))  # as `inspect conf`
    finally:
        app.close()
    for text in (shown, raw):
        assert "brokerpw" not in text
        assert "beatpw" not in text
        assert "redbeat_redis_url" in text
