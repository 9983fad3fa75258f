"""`beatflow pools set|list|delete`: named slot limits shared by every worker."""

from __future__ import annotations

import click

from beatflow.cli.common import (
    CliError,
    actor_option,
    echo_json,
    json_option,
    reason_option,
    runtime_or_exit,
)
from beatflow.runs.pools import PoolError, delete_pool, pool_json, set_pool


@click.group()
def pools() -> None:
    """Pools: at most SLOTS task slots at a time, across every worker, for tasks with pool=."""


@pools.command("set")
@click.argument("name")
@click.argument("slots", type=click.IntRange(min=0))
@click.option("--description", default=None, help="What the pool protects.")
@reason_option
@actor_option
@json_option
def set_(
    name: str, slots: int, description: str | None, reason: str, actor: str, as_json: bool
) -> None:
    """Create pool NAME with SLOTS slots, or resize it (takes effect at the next claim)."""
    try:
        pool = set_pool(runtime_or_exit(), name, slots, description, actor=actor, reason=reason)
    except PoolError as exc:
        raise CliError(str(exc)) from None
    if as_json:
        echo_json(pool_json(pool))
        return
    click.echo(f"pool {pool.name}: {pool.slots} slots ({pool.used} used, {pool.queued} queued)")


@pools.command("list")
@json_option
def list_(as_json: bool) -> None:
    """Every pool with its slots used (running), queued (waiting) and free."""
    found = runtime_or_exit().store.list_pools()
    if as_json:
        echo_json([pool_json(p) for p in found])
        return
    if not found:
        click.echo("no pools (create one: beatflow pools set NAME SLOTS)")
        return
    click.echo(f"{'POOL':<30} {'SLOTS':>6} {'USED':>6} {'QUEUED':>7} {'FREE':>6}  DESCRIPTION")
    for p in found:
        line = f"{p.name:<30} {p.slots:>6} {p.used:>6} {p.queued:>7} {p.free:>6}"
        click.echo(f"{line}  {p.description or ''}")


@pools.command()
@click.argument("name")
@reason_option
@actor_option
@json_option
def delete(name: str, reason: str, actor: str, as_json: bool) -> None:
    """Delete pool NAME: its tasks that have not started fail (as in Airflow)."""
    try:
        deleted = delete_pool(runtime_or_exit(), name, actor=actor, reason=reason)
    except PoolError as exc:
        raise CliError(str(exc)) from None
    if not deleted:
        raise CliError(f"no pool {name!r}; see `beatflow pools list`")
    if as_json:
        echo_json({"name": name, "deleted": True})
        return
    click.echo(f"deleted pool {name}")
