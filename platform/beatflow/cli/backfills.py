"""`beatflow dags backfill` (a range of past ticks: reprocess, dry run, its own max active
runs) and `beatflow dags backfills list|show|cancel`."""

from __future__ import annotations

from datetime import datetime

import click

from beatflow.cli.common import (
    actor_option,
    echo_json,
    get_app_or_exit,
    json_option,
    parse_conf,
    reason_option,
)
from beatflow.records_json import backfill_json, dag_run_json
from beatflow.runtime import runtime_of
from beatflow.times import parse_instant


def _parse_date(value: str, name: str) -> datetime:
    try:
        return parse_instant(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO date such as 2026-11-01 or 2026-11-01T10:00", param_hint=name
        ) from None


@click.command()
@click.argument("dag_id")
@click.option("--start", required=True, help="First logical date (ISO, inclusive).")
@click.option("--end", required=True, help="Last logical date (ISO, inclusive).")
@click.option(
    "--reprocess",
    type=click.Choice(["none", "failed", "all"]),
    default="none",
    show_default=True,
    help="none: only dates without a run; failed: re-run failed runs too; all: every run.",
)
@click.option(
    "--max-active-runs",
    type=click.IntRange(min=1),
    default=None,
    help="At most this many of the backfill's runs at once (default: all, queued behind "
    "the DAG's max_active_runs).",
)
@click.option("--conf", default=None, help="JSON object checked against the DAG's params.")
@click.option("--dry-run", is_flag=True, help="List the runs it would create or re-run; no change.")
@reason_option
@actor_option
@json_option
def backfill(
    dag_id: str,
    start: str,
    end: str,
    reprocess: str,
    max_active_runs: int | None,
    conf: str | None,
    dry_run: bool,
    reason: str,
    actor: str,
    as_json: bool,
) -> None:
    """Create the scheduled runs of a past range (idempotent: existing runs are kept unless
    --reprocess asks to run them again)."""
    from beatflow.runs.backfill import backfill_progress, start_backfill

    begin, finish = _parse_date(start, "--start"), _parse_date(end, "--end")
    if finish < begin:
        raise click.BadParameter("--end is before --start", param_hint="--end")
    runtime = runtime_of(get_app_or_exit())
    result = start_backfill(
        runtime,
        dag_id,
        begin,
        finish,
        reprocess=reprocess,
        max_active_runs=max_active_runs,
        conf=parse_conf(conf),
        dry_run=dry_run,
        actor=actor,
        reason=reason,
    )
    if dry_run:
        if as_json:
            echo_json(result.plan)
            return
        click.echo(f"dry run: {len(result.plan)} runs for {dag_id} between {begin} and {finish}")
        for entry in result.plan:
            was = f" (now {entry['state']})" if entry["state"] else ""
            click.echo(f"  {entry['action']:<6} {entry['run_id']}{was}")
        return
    if as_json:
        echo_json([dag_run_json(r) for r in result.runs])
        return
    made = result.backfill
    if made is None:  # only a dry run has no backfill
        return
    progress = backfill_progress(runtime, made)
    click.echo(
        f"backfill {made.id}: {len(result.plan)} runs for {dag_id} between {begin} and "
        f"{finish} ({_counts(progress)})"
    )


def _counts(progress: dict[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(progress.items())) or "nothing to do"


@click.group()
def backfills() -> None:
    """List, show and cancel a DAG's backfills."""


@backfills.command("list")
@click.argument("dag_id")
@json_option
def list_backfills(dag_id: str, as_json: bool) -> None:
    """A DAG's latest backfills, newest first, with their runs by state."""
    from beatflow.runs.backfill import backfill_progress

    runtime = runtime_of(get_app_or_exit())
    runtime.dag(dag_id)
    found = runtime.store.list_backfills(dag_id)
    shown = [backfill_json(b, backfill_progress(runtime, b)) for b in found]
    if as_json:
        echo_json(shown)
        return
    for b in shown:
        click.echo(
            f"{b['id']:>6}  {b['state']:<9} {b['start'][:10]}..{b['end'][:10]}  "
            f"reprocess={b['reprocess']}  {_counts(b['progress'])}"
        )


@backfills.command("cancel")
@click.argument("backfill_id", type=int)
@reason_option
@actor_option
@json_option
def cancel(backfill_id: int, reason: str, actor: str, as_json: bool) -> None:
    """Stop a backfill: none of its runs is started any more, those queued or running are
    cancelled."""
    from beatflow.runs.backfill import backfill_progress, cancel_backfill

    runtime = runtime_of(get_app_or_exit())
    ended = cancel_backfill(runtime, backfill_id, actor=actor, reason=reason)
    shown = backfill_json(ended, backfill_progress(runtime, ended))
    if as_json:
        echo_json(shown)
    else:
        click.echo(f"backfill {backfill_id} cancelled ({_counts(shown['progress'])})")
