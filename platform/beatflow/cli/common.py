"""Helpers shared by the CLI commands: settings loading with clean errors, JSON output."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from beatflow.errors import BeatflowError
from beatflow.settings import Settings


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
