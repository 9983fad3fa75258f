"""``init_app`` on a Celery app of the user's: what it refuses (every problem at once, nothing
changed), what it sets, and what it leaves as the app had it."""

from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from click.testing import CliRunner

from beatflow import init_app
from beatflow.cli import main
from beatflow.cli.common import EXIT_USAGE
from beatflow.errors import AppConfigError, BeatflowError, SettingsError
from beatflow.execution.send import BatchingCelery, BatchingDispatcher
from beatflow.runtime import runtime_of
from beatflow.settings import Settings

URL = "redis://127.0.0.1:6399/3"
SETTINGS = Settings(broker_url=URL)


@pytest.fixture
def apps() -> Iterator[list[Celery]]:
    made: list[Celery] = []
    yield made
    for app in made:
        app.close()


def user_app(apps: list[Celery], cls: type[Celery] = Celery, **config: Any) -> Celery:
    """An app configured as a project configures one: config_from_object on a module."""
    module = types.ModuleType("proj_celeryconfig")
    for name, value in config.items():
        setattr(module, name, value)
    app = cls("proj", set_as_current=False)
    app.config_from_object(module)
    apps.append(app)
    return app


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("task_serializer", "pickle"),
        ("result_serializer", "pickle"),
        ("accept_content", ["json", "pickle"]),
        ("result_accept_content", ["pickle"]),
        ("task_acks_late", False),  # Celery's default, but the app asked for it
        ("task_reject_on_worker_lost", False),
        ("task_always_eager", True),
        ("beat_scheduler", "celery.beat:PersistentScheduler"),
        ("enable_utc", False),
        ("task_default_queue", "proj"),
        ("task_time_limit", 30),
    ],
)
def test_a_setting_beatflow_relies_on_set_otherwise_is_refused(
    apps: list[Celery], name: str, value: Any
) -> None:
    app = user_app(apps, **{name: value})
    with pytest.raises(AppConfigError, match=name) as raised:
        init_app(app, SETTINGS, load_dags=False)
    assert isinstance(raised.value, BeatflowError)
    assert [p.split("=")[0] for p in raised.value.problems] == [name]
    assert getattr(app, "beatflow", None) is None
    assert app.conf[name] == value  # nothing changed


def test_every_problem_is_reported_at_once_with_passwords_masked(apps: list[Celery]) -> None:
    app = user_app(
        apps,
        task_serializer="pickle",
        broker_url="redis://:s3cret@elsewhere:6379/0",
        broker_transport_options={"visibility_timeout": 10},
    )
    with pytest.raises(AppConfigError) as raised:
        init_app(app, SETTINGS, load_dags=False)
    names = sorted(p.split("=")[0].split(":")[0] for p in raised.value.problems)
    assert names == ["broker_transport_options", "broker_url", "task_serializer"]
    assert "broker_transport_options: visibility_timeout set otherwise" in str(raised.value)
    assert "s3cret" not in str(raised.value)
    assert "BEATFLOW_BROKER_URL" in str(raised.value)  # what to do instead


def test_settings_that_agree_are_accepted(apps: list[Celery]) -> None:
    app = user_app(
        apps,
        broker_url=URL,
        result_backend=URL,
        task_serializer="json",
        accept_content=["application/json"],
        task_acks_late=True,
        task_default_queue="default",
    )
    init_app(app, SETTINGS, load_dags=False)
    assert app.conf.accept_content == ["json"]
    assert app.conf.task_acks_late is True


def test_the_apps_own_settings_tasks_and_class_stay(apps: list[Celery]) -> None:
    class ProjCelery(Celery):  # type: ignore[misc]
        pass

    routes = {"proj.tasks.add": {"queue": "math"}}
    app = user_app(
        apps,
        ProjCelery,
        task_routes=routes,
        task_annotations={"proj.tasks.add": {"rate_limit": "10/s"}},
        worker_prefetch_multiplier=8,
        result_expires=60,
        imports=("proj.tasks",),
        broker_transport_options={"queue_order_strategy": "priority"},
    )

    @app.task(name="proj.tasks.add")  # type: ignore[untyped-decorator]
    def add(x: int, y: int) -> int:
        return x + y

    assert init_app(app, SETTINGS, load_dags=False) is app
    assert app.conf.task_routes == routes
    assert app.conf.task_annotations == {"proj.tasks.add": {"rate_limit": "10/s"}}
    assert app.conf.worker_prefetch_multiplier == 8
    assert app.conf.result_expires == 60
    assert "proj.tasks" in app.conf.imports
    options = app.conf.broker_transport_options
    assert options["queue_order_strategy"] == "priority"  # the app's key kept
    assert options["visibility_timeout"] == SETTINGS.visibility_timeout  # beatflow's added
    # beatflow's needs are set, its tasks registered beside the app's
    assert app.conf.task_serializer == "json"
    assert app.conf.task_acks_late is True
    assert app.conf.beat_scheduler == "beatflow.scheduler.beat:BeatflowScheduler"
    assert {"proj.tasks.add", "beatflow.finish_run"} <= set(app.tasks)
    assert runtime_of(app).settings is SETTINGS
    # sends batch on it: its class with BatchingCelery mixed in, its dispatcher beatflow's
    assert isinstance(app, ProjCelery)
    assert isinstance(app, BatchingCelery)
    assert isinstance(app.events.Dispatcher(enabled=False), BatchingDispatcher)


def test_overrides_are_beatflow_settings(apps: list[Celery]) -> None:
    other = "redis://127.0.0.1:6399/5"
    app = init_app(user_app(apps), SETTINGS, load_dags=False, broker_url=other)
    assert runtime_of(app).settings.broker_url == other
    assert app.conf.broker_url == other
    with pytest.raises(SettingsError, match="no_such_thing"):
        init_app(user_app(apps), SETTINGS, load_dags=False, no_such_thing=1)


def test_an_app_gets_beatflow_once(apps: list[Celery]) -> None:
    app = init_app(user_app(apps), SETTINGS, load_dags=False)
    with pytest.raises(AppConfigError, match="already"):
        init_app(app, SETTINGS, load_dags=False)


def test_the_cli_names_an_app_that_is_not_there_or_has_no_beatflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "plainproj.py").write_text('from celery import Celery\napp = Celery("plain")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    runner = CliRunner()
    result = runner.invoke(main, ["--app", "no_such_proj_module", "dags", "list"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "--app no_such_proj_module: no Celery app loaded" in result.output
    result = runner.invoke(main, ["dags", "list"], env={"BEATFLOW_APP": "plainproj"})
    assert result.exit_code == EXIT_USAGE, result.output
    assert "has no beatflow; call beatflow.init_app(app)" in result.output


@pytest.mark.parametrize("command", ["dev", "chaos"])
def test_the_commands_that_start_their_own_stack_refuse_an_app(command: str) -> None:
    result = CliRunner().invoke(main, ["--app", "proj", command])
    assert result.exit_code == EXIT_USAGE, result.output
    assert f"`beatflow {command}` starts a stack of its own" in result.output
    result = CliRunner().invoke(main, [command, "--help"], env={"BEATFLOW_APP": "proj"})
    assert result.exit_code == 0  # --help still answers
