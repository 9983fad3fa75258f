"""`beatflow tasks list`: the plain Celery tasks BEATFLOW_IMPORTS loads, and the durable dedupe
rows of those with ``base=beatflow.Idempotent`` (one row per dedupe key: state, tries, result)."""

from __future__ import annotations

import click

from beatflow.cli.common import echo_json, get_app_or_exit, json_option, load_settings


@click.group()
def tasks() -> None:
    """Plain Celery tasks (BEATFLOW_IMPORTS) and their Idempotent dedupe rows."""


@tasks.command("list")
@click.option("--task", "names", multiple=True, help="Only this task (repeatable).")
@click.option("--state", help="Only rows in this state (success, failed, running, ...).")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@json_option
def list_rows(names: tuple[str, ...], state: str | None, limit: int, as_json: bool) -> None:
    """List Idempotent dedupe rows, newest first."""
    from beatflow import plain

    settings = load_settings()
    app = get_app_or_exit(settings)
    plain.install(app, settings, import_now=True)
    known = plain.plain_task_names(app)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise click.BadParameter(
            f"no plain task {', '.join(unknown)}; BEATFLOW_IMPORTS loads: "
            f"{', '.join(known) or 'none'}",
            param_hint="--task",
        )
    rows = plain.list_rows(app, names or known)
    rows = [r for r in rows if state is None or r.state == state][:limit]
    if as_json:
        echo_json(
            [
                {
                    "task": r.task_id,
                    "dedupe_key": r.dedupe_key,
                    "state": r.state,
                    "try_number": r.try_number,
                    "started_at": r.started_at,
                    "ended_at": r.ended_at,
                    "result": r.result,
                    "error": r.error,
                    "celery_task_id": r.celery_task_id,
                }
                for r in rows
            ]
        )
        return
    if not rows:
        click.echo("no Idempotent task rows")
        return
    for r in rows:
        when = r.ended_at or r.started_at
        click.echo(
            f"{r.task_id}  {r.dedupe_key}  {r.state}  try {r.try_number}  "
            f"{when.isoformat(timespec='seconds') if when else '-'}"
            + (f"  {r.error}" if r.error else "")
        )
