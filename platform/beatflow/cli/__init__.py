"""The `beatflow` command: a click group whose sub-commands live one module each and load lazily,
so `beatflow --help` stays fast and one broken sub-command cannot take the others down."""

from __future__ import annotations

import importlib
from typing import Any

import click

from beatflow.errors import BeatflowError

# name -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "config": "beatflow.cli.config:config",
    "dags": "beatflow.cli.dags:dags",
    "dlq": "beatflow.cli.dlq:dlq",
    "runs": "beatflow.cli.runs:runs",
    "db": "beatflow.cli.db:db",
    "dev": "beatflow.cli.dev:dev",
    "health": "beatflow.cli.health:health",
    "exporter": "beatflow.cli.exporter:exporter",
    "beat": "beatflow.cli.beat:beat",
    "web": "beatflow.cli.web:web",
    "chaos": "beatflow.cli.chaos:chaos",
    "tasks": "beatflow.cli.tasks:tasks",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BeatflowError as exc:
            # Every error we raise on purpose already says what happened and what to do.
            raise click.ClickException(str(exc)) from exc


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="beatflow")
def main() -> None:
    """beatflow: DAGs in dags/, run as Celery canvas, scheduled by an HA beat."""


def run(argv: list[str] | None = None) -> Any:
    return main.main(args=argv, prog_name="beatflow")
