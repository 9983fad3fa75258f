"""The `beatflow` command: a click group whose sub-commands live one module each and load lazily,
so `beatflow --help` stays fast and one broken sub-command cannot take the others down. Every
error ends the same way: ``error: <what happened>; <what to do>`` on stderr and an exit code of
``beatflow.cli.common.EXIT_CODES``."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from beatflow.cli.common import (
    APP_PATH,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
)
from beatflow.errors import AppConfigError, BeatflowError, MissingExtraError, SettingsError

# name -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "config": "beatflow.cli.config:config",
    "dags": "beatflow.cli.dags:dags",
    "dlq": "beatflow.cli.dlq:dlq",
    "pools": "beatflow.cli.pools:pools",
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
            usage = isinstance(exc, SettingsError | MissingExtraError | AppConfigError)
            raise CliError(str(exc), EXIT_USAGE if usage else EXIT_FAILED) from exc

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """click's main, with every error printed in the one style (click's own usage errors
        included) and the exit codes of EXIT_CODES."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "beatflow"
            click.echo(f"error: {exc.format_message().rstrip('.')}; see '{where} --help'", err=True)
            sys.exit(EXIT_USAGE)
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort as exc:
            interrupted = isinstance(exc.__context__, KeyboardInterrupt)
            click.echo("error: interrupted" if interrupted else "aborted", err=True)
            sys.exit(EXIT_INTERRUPTED if interrupted else EXIT_FAILED)
        sys.exit(rv if isinstance(rv, int) else 0)


def _exit_codes_epilog() -> str:
    rows = "\n".join(f"  {code:<4}{meaning}" for code, meaning in EXIT_CODES.items())
    return (
        "\b\nExit codes:\n"
        + rows
        + "\n\nCommands that print data take --json: one JSON document on stdout, nothing else."
    )


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_exit_codes_epilog(),
)
@click.version_option(package_name="beatflow")
@click.option(
    "--app",
    "app_path",
    envvar="BEATFLOW_APP",
    metavar="MODULE[:ATTR]",
    help="Your Celery app that beatflow.init_app ran on (as `celery -A`); default: beatflow's "
    "own. Env: BEATFLOW_APP.",
)
@click.pass_context
def main(ctx: click.Context, app_path: str | None) -> None:
    """beatflow: DAGs in dags/, run as Celery canvas, scheduled by an HA beat.

    Errors print as `error: <what happened>; <what to do>` on stderr.
    """
    ctx.meta[APP_PATH] = app_path
    # read here, not a beatflow setting: Settings.from_env would call it a misspelt one
    os.environ.pop("BEATFLOW_APP", None)


def run(argv: list[str] | None = None) -> Any:
    return main.main(args=argv, prog_name="beatflow")
