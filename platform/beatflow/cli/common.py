"""Helpers shared by the CLI commands: settings loading with clean errors, JSON output."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from beatflow.errors import BeatflowError
from beatflow.settings import Settings

if TYPE_CHECKING:
    from celery import Celery

    from beatflow.runtime import Runtime


def load_settings() -> Settings:
    """Settings from the environment; a bad value exits 2 with every problem listed."""
    try:
        return Settings.from_env()
    except BeatflowError as exc:
        raise click.ClickException(str(exc)) from exc


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def get_app_or_exit() -> Celery:
    """The Celery app for these settings; a bad setting ends the command with every problem."""
    from beatflow.app import create_app

    try:
        return create_app(load_settings(), load_dags=False)
    except BeatflowError as exc:
        raise click.ClickException(str(exc)) from exc


def runtime_or_exit() -> Runtime:
    from beatflow.runtime import runtime_of

    return runtime_of(get_app_or_exit())
