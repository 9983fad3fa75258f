"""`beatflow runs list|show`: DAG run history from the results database (Flower forgets; the
database keeps it)."""

from __future__ import annotations

import click

from beatflow.cli.common import echo_json, runtime_or_exit
from beatflow.records_json import dag_run_json, task_run_json

STATES = ["queued", "running", "success", "failed"]


@click.group()
def runs() -> None:
    """DAG run history."""


@runs.command("list")
@click.argument("dag_id", required=False)
@click.option("--state", type=click.Choice(STATES), help="Only runs in this state.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=25, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def list_(dag_id: str | None, state: str | None, limit: int, as_json: bool) -> None:
    """Recent DAG runs, newest first (all DAGs, or DAG_ID's)."""
    records = runtime_or_exit().store.list_dag_runs(dag_id, state=state, limit=limit)
    if as_json:
        echo_json([dag_run_json(r) for r in records])
        return
    if not records:
        click.echo("no runs")
        return
    for r in records:
        duration = f"{r.duration_seconds:.2f}s" if r.duration_seconds is not None else "-"
        logical = r.logical_date.isoformat() if r.logical_date else "-"
        click.echo(f"{r.dag_id:<24} {r.run_id:<48} {r.state:<8} {duration:>9}  {logical}")


@runs.command()
@click.argument("dag_id")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def show(dag_id: str, run_id: str, as_json: bool) -> None:
    """One DAG run, task by task: state, tries, durations, errors."""
    store = runtime_or_exit().store
    run = store.get_dag_run(dag_id, run_id)
    if run is None:
        raise click.ClickException(
            f"no run {run_id!r} of DAG {dag_id!r}; see `beatflow runs list {dag_id}`"
        )
    tasks = store.get_task_runs(dag_id, run_id)
    if as_json:
        echo_json({**dag_run_json(run), "tasks": [task_run_json(t) for t in tasks]})
        return
    duration = f"{run.duration_seconds:.2f}s" if run.duration_seconds is not None else "-"
    click.echo(f"{dag_id} / {run_id}: {run.state} ({run.trigger}, {duration})")
    for t in tasks:
        label = t.task_id if t.map_index < 0 else f"{t.task_id}[{t.map_index}]"
        took = f"{t.duration_seconds:.3f}s" if t.duration_seconds is not None else "-"
        click.echo(f"  {label:<32} {t.state:<16} try {t.try_number:<3} {took:>9}")
        if t.error:
            click.echo(f"      error: {t.error}")
