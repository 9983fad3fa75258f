"""`beatflow dags list|show|check|trigger|pause|unpause` (and `backfill`, `backfills`: see
``cli.backfills``)."""

from __future__ import annotations

import sys
from typing import Any

import click

from beatflow.cli.common import (
    actor_option,
    echo_json,
    get_app_or_exit,
    json_option,
    load_settings,
    parse_conf,
    reason_option,
    runtime_or_exit,
    say_unconsumed,
)
from beatflow.dag.assets import schedule_text
from beatflow.dag.loader import DagBag, load_dags
from beatflow.dag.model import DAG
from beatflow.errors import BeatflowError
from beatflow.records_json import dag_run_json, task_run_json
from beatflow.runtime import runtime_of


@click.group()
def dags() -> None:
    """List, inspect, check, trigger and pause DAGs."""


def _bag() -> DagBag:
    """The dags folder as workers load it, checked against the plain tasks' names too. The
    loader's own log lines are silenced: the command prints each error once."""
    import logging

    from beatflow.dag.loader import check_task_names

    settings = load_settings()
    logging.getLogger("beatflow.dag.loader").setLevel(logging.CRITICAL)
    bag = load_dags(settings.dags_folder, skip_modules=settings.imports)
    if settings.imports:
        from beatflow import plain

        app = get_app_or_exit(settings)
        plain.install(app, settings, import_now=True)
        check_task_names(bag, plain.plain_task_names(app))
    return bag


def _dag_json(dag: DAG, paused: bool | None) -> dict[str, Any]:
    return {
        "dag_id": dag.dag_id,
        "schedule": schedule_text(dag.schedule, dag.asset_schedule),
        "timezone": dag.timezone.key,
        "paused": paused,
        "tags": list(dag.tags),
        "tasks": len(dag.tasks),
        "file": dag.file,
        "line": dag.line,
        "description": dag.description,
    }


def _error_json(err: Any) -> dict[str, Any]:
    return {"file": err.file, "line": err.line, "dag_id": err.dag_id, "error": err.message}


@dags.command("list")
@json_option
def list_(as_json: bool) -> None:
    """Every DAG in the dags folder, and every module or DAG that failed to load."""
    bag = _bag()
    paused: set[str] | None
    try:
        paused = runtime_or_exit().store.paused_dag_ids()
    except BeatflowError:
        paused = None  # the list still works without a database
    rows = [
        _dag_json(d, None if paused is None else d.dag_id in paused)
        for d in sorted(bag.dags.values(), key=lambda d: d.dag_id)
    ]
    if as_json:
        echo_json({"dags": rows, "errors": [_error_json(e) for e in bag.errors]})
        return
    if rows:
        width = max(len(r["dag_id"]) for r in rows)
        for r in rows:
            state = {True: "paused", False: "active", None: "?"}[r["paused"]]
            click.echo(
                f"{r['dag_id']:<{width}}  {state:<6}  {r['schedule'] or 'manual':<28}  "
                f"{r['tasks']:>3} tasks  {','.join(r['tags'])}"
            )
    else:
        click.echo(f"no DAGs in {bag.folder}")
    if bag.errors:
        click.echo(f"\n{len(bag.errors)} broken:", err=True)
        for err in bag.errors:
            click.echo(f"  {err}", err=True)


@dags.command()
@json_option
def check(as_json: bool) -> None:
    """Load every DAG; exit 1 if any module or DAG is broken (for CI in your repo). Warn (exit 0)
    about tasks whose pool does not exist in the results database."""
    from beatflow.dag.compile import compile_problems
    from beatflow.runs.pools import missing_pools
    from beatflow.scheduler.checks import schedule_problems

    bag = _bag()
    unschedulable = schedule_problems(bag.dags.values())
    uncompilable = compile_problems(bag.dags.values())
    ok = bag.ok and not unschedulable and not uncompilable
    pooled = [d for d in bag.dags.values() if any(t.pool for t in d.tasks.values())]
    warnings = missing_pools(pooled, runtime_or_exit()) if pooled else []  # no DB without pools
    if as_json:
        echo_json(
            {
                "ok": ok,
                "dags": sorted(bag.dags),
                "seconds": round(bag.seconds, 3),
                "errors": [_error_json(e) for e in bag.errors],
                "schedule_errors": unschedulable,
                "compile_errors": uncompilable,
                "warnings": warnings,
            }
        )
    else:
        for err in bag.errors:
            click.echo(f"error: {err}", err=True)
        for problem in [*unschedulable, *uncompilable]:
            click.echo(f"error: {problem}", err=True)
        for warning in warnings:
            click.echo(f"warning: {warning}", err=True)
        broken = len(bag.errors) + len(unschedulable) + len(uncompilable)
        click.echo(f"{len(bag.dags)} DAGs loaded, {broken} broken ({bag.seconds:.2f}s)")
    sys.exit(0 if ok else 1)


@dags.command()
@click.argument("dag_id")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "mermaid", "dot", "json"]),
    default="text",
    show_default=True,
)
@json_option
def show(dag_id: str, fmt: str, as_json: bool) -> None:
    """Draw a DAG (text, Mermaid or Graphviz DOT) and the canvas it compiles to; say where a
    barrier was added because the DAG is not series-parallel. --json is --format json."""
    from beatflow.dag.plan import build_plan
    from beatflow.dag.render import plan_dict, render_dot, render_mermaid, render_text

    if as_json:
        fmt = "json"
    dag = _bag().get(dag_id)
    if fmt == "mermaid":
        click.echo(render_mermaid(dag))
    elif fmt == "dot":
        click.echo(render_dot(dag))
    elif fmt == "json":
        plan = build_plan(dag)
        echo_json(
            {
                **_dag_json(dag, None),
                "tasks": [
                    {
                        "task_id": t,
                        "upstream": sorted(s.upstream),
                        "trigger_rule": s.trigger_rule,
                        "mapped_over": s.map_over,
                        "control": s.control,
                        "retries": s.retry.retries,
                    }
                    for t, s in dag.tasks.items()
                ],
                "plan": plan_dict(plan.root),
                "barriers": [
                    {
                        "before": list(b.before),
                        "after": list(b.after),
                        "added_waits": [list(e) for e in b.false_edges],
                    }
                    for b in plan.barriers
                ],
            }
        )
    else:
        click.echo(render_text(dag))


@dags.command()
@click.argument("dag_id")
@click.option("--conf", help="JSON object of params for this run, checked against the DAG.")
@click.option("--run-id", help="Run id (default manual__<now>); the same id twice is one run.")
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the run; exit 0 only if it succeeds. Says so on stderr when no worker consumes "
    "the run's queues.",
)
@click.option(
    "--timeout",
    type=float,
    default=3600.0,
    show_default=True,
    help="With --wait: give up after this many seconds (exit 3).",
)
@json_option
@click.option(
    "--api",
    "api_url",
    metavar="URL",
    help="Trigger through beatflow web's API (default: BEATFLOW_API_URL) with "
    "BEATFLOW_API_TOKEN: no Redis, database or DAG code needed.",
)
@reason_option
@actor_option
def trigger(
    dag_id: str,
    conf: str | None,
    run_id: str | None,
    wait: bool,
    timeout: float,
    as_json: bool,
    api_url: str | None,
    reason: str,
    actor: str,
) -> None:
    """Start a DAG run now."""
    from beatflow.runs import trigger_and_follow, trigger_dag

    parsed = parse_conf(conf)
    settings = load_settings()
    if api_url or settings.api_url:
        from beatflow.cli.api_client import trigger_via_api

        url = api_url or settings.api_url
        trigger_via_api(
            url,
            settings.api_token,
            dag_id,
            parsed,
            run_id,
            wait=wait,
            timeout=timeout,
            as_json=as_json,
        )
        return
    app = get_app_or_exit()
    if not wait:
        record = trigger_dag(
            runtime_of(app), dag_id, conf=parsed, run_id=run_id, actor=actor, reason=reason
        )
        if as_json:
            echo_json(dag_run_json(record))
        else:
            click.echo(f"triggered {dag_id} run {record.run_id} ({record.state})")
        return

    def show_triggered(record: Any) -> None:
        if not as_json:
            click.echo(f"triggered {dag_id} run {record.run_id}; following it...")

    def show_change(t: Any) -> None:
        if not as_json:
            label = t.task_id if t.map_index < 0 else f"{t.task_id}[{t.map_index}]"
            click.echo(f"  {label:<30} {t.state:<16} try {t.try_text}")

    try:
        final = trigger_and_follow(
            runtime_of(app),
            dag_id,
            conf=parsed,
            run_id=run_id,
            on_triggered=show_triggered,
            on_task_change=show_change,
            on_unconsumed=say_unconsumed,
            timeout=timeout,
            actor=actor,
            reason=reason,
        )
    except TimeoutError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(3)
    if as_json:
        store = runtime_of(app).store
        echo_json(
            {
                **dag_run_json(final),
                "tasks": [task_run_json(t) for t in store.get_task_runs(dag_id, final.run_id)],
            }
        )
    else:
        click.echo(f"run {final.run_id}: {final.state} in {final.duration_seconds or 0:.2f}s")
    sys.exit(0 if final.state == "success" else 1)


def _set_paused(dag_id: str, paused: bool, actor: str, reason: str, as_json: bool) -> None:
    from beatflow.runs.controls import set_paused

    # an unknown DAG: an error
    set_paused(runtime_or_exit(), dag_id, paused, actor=actor, reason=reason)
    if as_json:
        echo_json({"dag_id": dag_id, "paused": paused})
        return
    click.echo(f"{dag_id} {'paused' if paused else 'unpaused'}")


@dags.command()
@click.argument("dag_id")
@reason_option
@actor_option
@json_option
def pause(dag_id: str, reason: str, actor: str, as_json: bool) -> None:
    """Stop scheduling a DAG (from the next tick, on every beat replica; survives restarts)."""
    _set_paused(dag_id, True, actor, reason, as_json)


@dags.command()
@click.argument("dag_id")
@reason_option
@actor_option
@json_option
def unpause(dag_id: str, reason: str, actor: str, as_json: bool) -> None:
    """Resume scheduling a paused DAG."""
    _set_paused(dag_id, False, actor, reason, as_json)


def _add_backfill_commands() -> None:
    from beatflow.cli.backfills import backfill, backfills

    dags.add_command(backfill)
    dags.add_command(backfills)


_add_backfill_commands()
