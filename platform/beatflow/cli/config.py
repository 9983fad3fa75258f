"""`beatflow config show`: the effective settings, secrets masked."""

from __future__ import annotations

import click

from beatflow.cli.common import echo_json, json_option, load_settings


@click.group()
def config() -> None:
    """Inspect beatflow's settings."""


@config.command("show")
@json_option
def show(as_json: bool) -> None:
    """Print every setting (BEATFLOW_* variable) in effect, with secrets masked."""
    settings = load_settings()
    values = settings.masked()
    if as_json:
        echo_json(values)
        return
    width = max(len(k) for k in values)
    for key, value in values.items():
        click.echo(f"{key:<{width}}  {value}")
