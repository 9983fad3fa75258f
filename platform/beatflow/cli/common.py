"""Helpers shared by the CLI commands: settings and the app from the composition root, JSON
output. A :class:`~beatflow.errors.BeatflowError` raised by a command (a bad setting, an unknown
DAG) needs no handling here: ``LazyGroup.invoke`` turns it into a clean error message."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from beatflow.runtime import Runtime, runtime_of
from beatflow.settings import Settings

if TYPE_CHECKING:
    from celery import Celery


def load_settings() -> Settings:
    """Settings from the environment; a bad value ends the command with every problem listed."""
    return Settings.from_env()


def parse_conf(raw: str | None) -> dict[str, Any] | None:
    """A ``--conf`` option's value: a JSON object, or None when the option was not given."""
    if raw is None:
        return None
    try:
        conf = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not valid JSON ({exc.msg} at column {exc.colno}); e.g. "
            '--conf \'{"day": "2026-01-01"}\'',
            param_hint="--conf",
        ) from None
    if not isinstance(conf, dict):
        raise click.BadParameter(
            'must be a JSON object, e.g. --conf \'{"day": "2026-01-01"}\'', param_hint="--conf"
        )
    return conf


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def get_app_or_exit(settings: Settings | None = None) -> Celery:
    """The Celery app for ``settings`` (from the environment when omitted), DAGs loaded on
    first use; a bad setting ends the command with every problem."""
    # Imported here, not above: commands that need no app (config, health, db) stay light.
    from beatflow.app import create_app

    return create_app(settings or load_settings(), load_dags=False)


def runtime_or_exit() -> Runtime:
    return runtime_of(get_app_or_exit())
