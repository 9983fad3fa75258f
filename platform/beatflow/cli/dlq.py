"""`beatflow dlq list|show|replay|purge`: task runs that exhausted their retries."""

from __future__ import annotations

import click

from beatflow.cli.common import (
    CliError,
    actor_option,
    echo_json,
    json_option,
    reason_option,
    runtime_or_exit,
    say_unconsumed,
)
from beatflow.records_json import dead_letter_json
from beatflow.runs.controls import purge_dead_letters


@click.group()
def dlq() -> None:
    """Dead letters: task runs that failed after their last retry."""


@dlq.command("list")
@click.argument("dag_id", required=False)
@click.option(
    "--all", "include_replayed", is_flag=True, help="Include replayed and stale (closed) ones."
)
@json_option
def list_(dag_id: str | None, include_replayed: bool, as_json: bool) -> None:
    """Dead letters, newest first."""
    letters = runtime_or_exit().store.list_dead_letters(dag_id, include_replayed=include_replayed)
    if as_json:
        echo_json([dead_letter_json(d) for d in letters])
        return
    if not letters:
        click.echo("no dead letters")
    for d in letters:
        replayed = " (replayed)" if d.replayed_at else ""
        if d.closed_at is not None:
            replayed = f" (stale: {d.closed_reason})"
        click.echo(f"{d.id:>6}  {d.dedupe_key:<60} tries {d.tries}  {d.error[:80]}{replayed}")


@dlq.command()
@click.argument("letter_id", type=int)
@json_option
def show(letter_id: int, as_json: bool) -> None:
    """One dead letter with its arguments, conf and traceback."""
    d = runtime_or_exit().store.get_dead_letter(letter_id)
    if d is None:
        raise CliError(f"no dead letter {letter_id}; see `beatflow dlq list`")
    data = dead_letter_json(d, traceback=True)
    if as_json:
        echo_json(data)
        return
    for key, value in data.items():
        if key != "traceback":
            click.echo(f"{key:>12}: {value}")
    click.echo(d.traceback or "")


@dlq.command()
@click.argument("letter_id", type=int)
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the replayed run; exit 0 only on success. Says so on stderr when no worker "
    "consumes the run's queues.",
)
@click.option("--timeout", type=float, default=3600.0, show_default=True)
@json_option
@reason_option
@actor_option
def replay(
    letter_id: int, wait: bool, timeout: float, as_json: bool, reason: str, actor: str
) -> None:
    """Run a dead letter's task again, as new tries under the same dedupe key with its full
    retry policy, then the downstream tasks that did not run because of it; the DAG run is
    closed again. A stale letter (its run marked, its task cleared, a newer letter of the
    same task run) is refused with the reason."""
    from beatflow.runs import follow_run
    from beatflow.runs.replay import replay_dead_letter

    runtime = runtime_or_exit()
    run = replay_dead_letter(runtime, letter_id, actor=actor, reason=reason)
    out = {"letter_id": letter_id, "dag_id": run.dag_id, "run_id": run.run_id, "state": None}
    if not as_json:
        click.echo(f"replaying dead letter {letter_id} in run {run.dag_id}/{run.run_id}")
    if wait:
        final = follow_run(
            runtime, run.dag_id, run.run_id, on_unconsumed=say_unconsumed, timeout=timeout
        )
        out["state"] = final.state
        if as_json:
            echo_json(out)
        else:
            click.echo(f"run {final.run_id}: {final.state}")
        raise SystemExit(0 if final.state == "success" else 1)
    if as_json:
        echo_json(out)


@dlq.command()
@click.argument("dag_id", required=False)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@reason_option
@actor_option
@json_option
def purge(dag_id: str | None, yes: bool, reason: str, actor: str, as_json: bool) -> None:
    """Delete dead letters (all, or DAG_ID's)."""
    what = f"dead letters of {dag_id}" if dag_id else "all dead letters"
    if not yes:
        click.confirm(f"Delete {what}?", abort=True, err=as_json)
    n = purge_dead_letters(runtime_or_exit(), dag_id, actor=actor, reason=reason)
    if as_json:
        echo_json({"dag_id": dag_id, "deleted": n})
        return
    click.echo(f"deleted {n} dead letters")
