"""`beatflow runs list|show|cancel|clear|mark|audit`: DAG run history from the results database
(Flower forgets; the database keeps it) and the operator's verbs, each recorded in the audit
table with who ran it and why."""

from __future__ import annotations

from typing import Any

import click

from beatflow.cli.common import (
    CliError,
    actor_option,
    echo_json,
    json_option,
    reason_option,
    runtime_or_exit,
)
from beatflow.records_json import dag_run_json, task_run_json
from beatflow.runs.pools import waiter_json
from beatflow.states import DagRunState

STATES = [str(s) for s in DagRunState]


@click.group()
def runs() -> None:
    """DAG run history, and the operator's verbs: cancel, clear, mark (audited)."""


@runs.command("list")
@click.argument("dag_id", required=False)
@click.option("--state", type=click.Choice(STATES), help="Only runs in this state.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=25, show_default=True)
@json_option
def list_(dag_id: str | None, state: str | None, limit: int, as_json: bool) -> None:
    """Recent DAG runs, newest first (all DAGs, or DAG_ID's)."""
    runtime = runtime_or_exit()
    records = runtime.store.list_dag_runs(dag_id, state=state, limit=limit)
    if not records and dag_id is not None:
        runtime.dag(dag_id)  # an unknown DAG is an error (with a did-you-mean), not "no runs"
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
@json_option
def show(dag_id: str, run_id: str, as_json: bool) -> None:
    """One DAG run, task by task: state, tries, durations, errors."""
    store = runtime_or_exit().store
    run = store.get_dag_run(dag_id, run_id)
    if run is None:
        raise CliError(f"no run {run_id!r} of DAG {dag_id!r}; see `beatflow runs list {dag_id}`")
    tasks = store.get_task_runs(dag_id, run_id)
    waiting = store.pool_waiters(dag_id, run_id)  # task runs waiting for a pool's slots
    if as_json:
        echo_json({**dag_run_json(run), "tasks": [task_run_json(t) for t in tasks],
                   "pool_waits": [waiter_json(w) for w in waiting]})  # fmt: skip
        return
    duration = f"{run.duration_seconds:.2f}s" if run.duration_seconds is not None else "-"
    click.echo(f"{dag_id} / {run_id}: {run.state} ({run.trigger}, {duration})")
    for t in tasks:
        label = t.task_id if t.map_index < 0 else f"{t.task_id}[{t.map_index}]"
        took = f"{t.duration_seconds:.3f}s" if t.duration_seconds is not None else "-"
        click.echo(f"  {label:<32} {t.state:<16} try {t.try_text:<18} {took:>9}")
        if t.error:  # a skipped task run's is why it was skipped
            click.echo(f"      {'reason' if t.state == 'skipped' else 'error'}: {t.error}")
    for w in waiting:
        label = w.task_id if w.map_index < 0 else f"{w.task_id}[{w.map_index}]"
        click.echo(f"  {label:<32} waiting for {w.slots} slot(s) of pool {w.pool} since {w.since}")
    for n in store.list_notifications(dag_id, run_id):  # notifier events (notify.deliver)
        _dag, _run, task_id, index, try_number, event, notifier = n.event_key.rsplit("/", 6)
        where = task_id if index == "-1" else f"{task_id}[{index}]"
        click.echo(
            f"  notify {where} {event} (try {try_number}, notifier {notifier}): {n.state}"
            f"{f' after {n.tries} tries' if n.tries > 1 else ''}{f': {n.error}' if n.error else ''}"
        )


def _report(run: Any, as_json: bool, verb: str) -> None:
    if as_json:
        echo_json(
            {
                **dag_run_json(run),
                "failure_reason": run.failure_reason,
                "resume_count": run.resume_count,
            }
        )
        return
    why = f" ({run.failure_reason})" if run.failure_reason else ""
    click.echo(f"{verb} {run.dag_id} run {run.run_id}: now {run.state}{why}")


@runs.command()
@click.argument("dag_id")
@click.argument("run_id")
@click.option("--terminate", is_flag=True, help="Also kill the task runs still running.")
@reason_option
@actor_option
@json_option
def cancel(
    dag_id: str, run_id: str, terminate: bool, reason: str, actor: str, as_json: bool
) -> None:
    """Cancel a queued or running run: no further task of it starts, the messages of its
    unfinished task runs are revoked (running ones killed with --terminate), its
    max_active_runs slot goes to the next queued run."""
    from beatflow.runs.operator import cancel_run

    run = cancel_run(
        runtime_or_exit(), dag_id, run_id, actor=actor, reason=reason, terminate=terminate
    )
    _report(run, as_json, "cancelled")


@runs.command()
@click.argument("dag_id")
@click.argument("run_id")
@click.option("--task", "tasks", multiple=True, help="A task to clear (repeatable); default all.")
@click.option("--downstream", is_flag=True, help="Also clear the tasks downstream of them.")
@click.option("--only-failed", is_flag=True, help="Only failed, upstream_failed, cancelled.")
@reason_option
@actor_option
@json_option
def clear(
    dag_id: str,
    run_id: str,
    tasks: tuple[str, ...],
    downstream: bool,
    only_failed: bool,
    reason: str,
    actor: str,
    as_json: bool,
) -> None:
    """Run task runs of a run again, each as a new try (their side effects happen again, on
    purpose); the run goes back to running and ends again."""
    from beatflow.runs.operator import clear_run

    run = clear_run(
        runtime_or_exit(),
        dag_id,
        run_id,
        tasks=tasks,
        downstream=downstream,
        only_failed=only_failed,
        actor=actor,
        reason=reason,
    )
    _report(run, as_json, "cleared")


@runs.command()
@click.argument("dag_id")
@click.argument("run_id")
@click.option("--state", required=True, type=click.Choice(["success", "failed"]))
@click.option("--task", "task_id", help="Mark this task's task runs, not the run.")
@reason_option
@actor_option
@json_option
def mark(
    dag_id: str,
    run_id: str,
    state: str,
    task_id: str | None,
    reason: str,
    actor: str,
    as_json: bool,
) -> None:
    """Set a run's state (its unfinished task runs are cancelled), or one task's."""
    from beatflow.runs.operator import mark_run

    run = mark_run(
        runtime_or_exit(),
        dag_id,
        run_id,
        state=state,
        task_id=task_id,
        actor=actor,
        reason=reason,
    )
    _report(run, as_json, "marked")


@runs.command()
@click.argument("dag_id", required=False)
@click.argument("run_id", required=False)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@json_option
def audit(dag_id: str | None, run_id: str | None, limit: int, as_json: bool) -> None:
    """Who did what to which run, when and why; newest first."""
    records = runtime_or_exit().store.list_audit(dag_id, run_id, limit=limit)
    if as_json:
        echo_json(
            [
                {
                    "id": a.id,
                    "at": a.at.isoformat(),
                    "actor": a.actor,
                    "action": a.action,
                    "dag_id": a.dag_id,
                    "run_id": a.run_id,
                    "detail": a.detail,
                }
                for a in records
            ]
        )
        return
    if not records:
        click.echo("no audit records")
    for a in records:
        where = "/".join(x for x in (a.dag_id, a.run_id) if x)
        reason = a.detail.get("reason") or ""
        click.echo(f"{a.at:%Y-%m-%d %H:%M:%S}  {a.actor:<16} {a.action:<8} {where}  {reason}")


@runs.command()
@json_option
def reconcile(as_json: bool) -> None:
    """Run one reconciler pass now (workers run one every BEATFLOW_RECONCILE_INTERVAL): dispatch
    queued runs, fail runs past dagrun_timeout, close or resume silent runs."""
    from beatflow.runs.reconciler import reconcile_once

    report = reconcile_once(runtime_or_exit())
    data = {
        "dispatched": report.dispatched,
        "closed": report.closed,
        "resumed": report.resumed,
        "failed": report.failed,
    }
    if as_json:
        echo_json(data)
        return
    click.echo(
        f"dispatched {report.dispatched}, closed {len(report.closed)}, "
        f"resumed {len(report.resumed)}, failed {len(report.failed)}"
    )
    for what, names in (
        ("closed", report.closed),
        ("resumed", report.resumed),
        ("failed", report.failed),
    ):
        for name in names:
            click.echo(f"  {what}: {name}")
