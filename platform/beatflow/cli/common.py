"""Helpers shared by the CLI commands: the exit codes, the one error style, the one ``--json``
option, settings and the app from the composition root. A
:class:`~beatflow.errors.BeatflowError` raised by a command (a bad setting, an unknown DAG) needs
no handling here: ``LazyGroup`` turns it into ``error: <what happened>; <what to do>``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from beatflow.runtime import Runtime, runtime_of
from beatflow.settings import Settings

if TYPE_CHECKING:
    from celery import Celery

    from beatflow.runs.consumers import QueueCheck

F = TypeVar("F", bound=Callable[..., Any])

# where the root command keeps --app (BEATFLOW_APP) in click's context meta
APP_PATH = "beatflow.app_path"

# The exit codes of every beatflow command (also in `beatflow --help`).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 3
EXIT_INTERRUPTED = 130
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "ok (a probe: healthy; --wait: the run succeeded)",
    EXIT_FAILED: "the operation failed, or the run or process it reports on did",
    EXIT_USAGE: "usage: a bad argument or BEATFLOW_* value, or a missing extra; nothing done",
    EXIT_TIMEOUT: "--wait gave up before the run finished (the run goes on)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C, SIGTERM)",
}


class CliError(click.ClickException):
    """Raised by a command to end with ``error: <what happened>; <what to do>`` on stderr and
    ``exit_code`` (one of :data:`EXIT_CODES`)."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click types it as a class variable

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """End the command: ``error: <message>`` on stderr, exit ``code``."""
    raise CliError(message, code)


def json_option(fn: F) -> F:
    """The one ``--json`` flag: the command prints one JSON document on stdout and nothing else
    there (progress and errors go to stderr); the parameter is ``as_json``."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON document on stdout (nothing else there), for scripts.",
    )(fn)


def actor_option(fn: F) -> F:
    """The one ``--actor`` option of the operator's verbs: who does this, as the audit table
    records it (default ``cli:<os user>``); the parameter is ``actor``."""
    return click.option(
        "--actor",
        default=_default_actor,
        show_default="cli:<os user>",
        help="Who does this (recorded in the audit table).",
    )(fn)


def _default_actor() -> str:
    # Imported here, not above: commands that need no app (db) stay light.
    from beatflow.runs.controls import cli_actor

    return cli_actor()


def reason_option(fn: F) -> F:
    """The one ``--reason`` option of the operator's verbs: why, as the audit table records it;
    the parameter is ``reason``."""
    return click.option("--reason", default="", help="Why (recorded in the audit table).")(fn)


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
    """Print ``data`` as the command's one JSON document on stdout."""
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def get_app_or_exit(settings: Settings | None = None) -> Celery:
    """The Celery app for ``settings`` (from the environment when omitted), DAGs loaded on
    first use; a bad setting ends the command with every problem. With ``--app`` (or
    BEATFLOW_APP) it is the user's app, as `celery -A` finds it, with the settings init_app
    gave it."""
    ctx = click.get_current_context(silent=True)
    app_path = ctx.meta.get(APP_PATH) if ctx is not None else None
    if app_path:
        return _user_app(app_path)
    # Imported here, not above: commands that need no app (config, health, db) stay light.
    from beatflow.app import create_app

    return create_app(settings or load_settings(), load_dags=False)


def _user_app(app_path: str) -> Celery:
    from celery.app.utils import find_app

    from beatflow.errors import BeatflowError

    try:
        app = find_app(app_path)
    except BeatflowError:  # init_app's own (a refused setting): it says what to do
        raise
    except Exception as exc:  # noqa: BLE001 - any error in the user's module, reported alike
        fail(
            f"--app {app_path}: no Celery app loaded from there ({type(exc).__name__}: {exc}); "
            "name a module or module:attribute importable from here, as `celery -A` takes",
            EXIT_USAGE,
        )
    if not isinstance(getattr(app, "beatflow", None), Runtime):
        fail(
            f"--app {app_path}: the Celery app {app.main!r} has no beatflow; call "
            "beatflow.init_app(app) where the app is built",
            EXIT_USAGE,
        )
    return app


def refuse_app(command: str) -> None:
    """End ``command`` with a usage error when --app (or BEATFLOW_APP) names an app: it starts
    a stack of its own on beatflow's app, and would otherwise ignore yours silently."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.find_root().meta.get(APP_PATH):
        fail(
            f"`beatflow {command}` starts a stack of its own on beatflow's app and does not take "
            f"--app (or BEATFLOW_APP); run it without, or run your app with `celery -A`",
            EXIT_USAGE,
        )


def say_unconsumed(check: QueueCheck) -> None:
    """The one line a waiting command prints when no worker consumes its run's queues: on
    stderr, so stdout stays the command's output (one JSON document with --json)."""
    ctx = click.get_current_context(silent=True)
    app_path = (ctx.meta.get(APP_PATH) if ctx is not None else None) or "beatflow"
    queues = ", ".join(f"'{q}'" for q in check.missing)
    plural = "s" if len(check.missing) > 1 else ""
    answered = f"{check.workers} worker{'' if check.workers == 1 else 's'} answered"
    click.echo(
        f"no worker consumes queue{plural} {queues} (checked {check.at:%H:%M:%S} UTC, {answered}):"
        f" the run waits until one does; start one with "
        f"`celery -A {app_path} worker -Q {','.join(check.missing)}`",
        err=True,
    )


def runtime_or_exit() -> Runtime:
    return runtime_of(get_app_or_exit())
