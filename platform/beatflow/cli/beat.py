"""`beatflow beat status [--json]`: the current beat leader and its epoch, the lock's remaining
TTL, the replicas that compete for it, and the next due DAG schedules and periodic tasks."""

from __future__ import annotations

import time

import click

from beatflow.cli.common import CliError, echo_json, json_option, load_settings


@click.group()
def beat() -> None:
    """The HA beat (run it with `celery -A beatflow beat`)."""


@beat.command()
@json_option
@click.option("--limit", default=10, show_default=True, help="How many next due DAGs to show.")
def status(as_json: bool, limit: int) -> None:
    """Show the leader, the lock's TTL and the next due DAG runs."""
    import redis

    from beatflow.scheduler.beat import redis_client
    from beatflow.scheduler.status import read_status
    from beatflow.settings import mask_url

    settings = load_settings()
    try:
        st = read_status(redis_client(settings), limit=limit)
    except redis.RedisError as exc:
        raise CliError(
            f"cannot read the beat state from Redis at {mask_url(settings.effective_redbeat_url)}"
            f": {exc}; check BEATFLOW_REDBEAT_URL (or BEATFLOW_BROKER_URL)"
        ) from exc
    if as_json:
        echo_json(st.as_dict())
        return
    if st.leader is None:
        click.echo(f"leader: none (no beat holds the lock; last epoch {st.epoch})")
    else:
        age = time.time() - float(st.leader.get("since", time.time()))
        click.echo(
            f"leader: {st.leader['instance']} epoch {st.leader['epoch']} "
            f"(leading for {age:.0f}s), lock TTL {st.lock_ttl_seconds:.2f}s"
        )
    for r in st.replicas:
        loop_age = r.get("loop_age_seconds")
        loop = "" if loop_age is None else f", loop pass {loop_age:.1f}s ago"
        click.echo(
            f"  replica {r['instance']}: {r['role']}{loop}{' (STALLED)' if r['stalled'] else ''}"
        )
    click.echo(f"schedule entries: {st.entries}; next due:")
    for d in st.next_due:
        what = d["dag_id"] if d["kind"] == "dag" else f"task {d['name']} -> {d['task']}"
        off = "" if d.get("enabled", True) else " [disabled]"
        click.echo(f"  {d['due_at']}  {what}  ({d['schedule']}){off}")
