"""`beatflow assets list|show|emit`: data-aware scheduling's assets, their lineage (producers
-> asset -> consumers) and events; emit records an update from outside, audited."""

from __future__ import annotations

from typing import Any

import click

from beatflow.cli.common import (
    CliError,
    actor_option,
    echo_json,
    json_option,
    parse_conf,
    reason_option,
    runtime_or_exit,
)


@click.group()
def assets() -> None:
    """Assets: what updates them, which DAGs they schedule, their events."""


@assets.command("list")
@json_option
def list_(as_json: bool) -> None:
    """Every asset: producers -> asset -> consumers, events and the newest one."""
    from beatflow.runs.assets import assets_overview

    rows = assets_overview(runtime_or_exit(), events=1)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no assets")
    for a in rows:
        last = a["events"][0]["created_at"] if a["events"] else "never"
        click.echo(
            f"{', '.join(a['producers']) or '-'} -> {a['name']} -> "
            f"{', '.join(a['consumers']) or '-'}  ({a['event_count']} events, last {last})"
        )


@assets.command()
@click.argument("name")
@click.option("--limit", type=int, default=20, show_default=True, help="Events to show.")
@json_option
def show(name: str, limit: int, as_json: bool) -> None:
    """One asset: its producers, consumers and newest events (and who consumed each)."""
    from beatflow.runs.assets import asset_detail

    data = asset_detail(runtime_or_exit(), name, events=max(0, limit))
    if not data["producers"] and not data["consumers"] and not data["event_count"]:
        raise CliError(f"no asset {name!r}: no DAG names it and it has no events; see "
                       "`beatflow assets list`")  # fmt: skip
    if as_json:
        echo_json(data)
        return
    click.echo(f"asset      {name}")
    click.echo(f"producers  {', '.join(data['producers']) or '-'}")
    click.echo(f"consumers  {', '.join(data['consumers']) or '-'}")
    click.echo(f"events     {data['event_count']}")
    for e in data["events"]:
        by = f"{e['dag_id']}/{e['run_id']}.{e['task_id']}" if e["source"] == "task" else e["actor"]
        runs = ", ".join(f"{c['dag_id']}/{c['run_id']}" for c in e["consumed_by"]) or "-"
        click.echo(f"  {e['id']:>6}  {e['created_at']}  by {by}  consumed by {runs}")


@assets.command()
@click.argument("name")
@click.option("--extra", default=None, metavar="JSON", help="A JSON object kept with the event.")
@reason_option
@actor_option
@json_option
def emit(name: str, extra: str | None, reason: str, actor: str, as_json: bool) -> None:
    """Record that asset NAME was updated (by something outside beatflow): the DAGs scheduled
    on it run as their conditions say."""
    from beatflow.runs.assets import emit_asset

    payload: dict[str, Any] | None = parse_conf(extra)
    event = emit_asset(runtime_or_exit(), name, extra=payload, actor=actor, reason=reason)
    if as_json:
        echo_json(event.to_json())
        return
    click.echo(f"asset {name} updated: event {event.id}")
