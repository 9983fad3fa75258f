"""`beatflow db`: bring the results database schema up to date, show its revision, prune old
runs and consumed asset events."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import click

from beatflow.cli.common import (
    actor_option,
    echo_json,
    json_option,
    load_settings,
    reason_option,
    runtime_or_exit,
)
from beatflow.settings import mask_url
from beatflow.store import Store
from beatflow.store.records import AuditNote

_AGE = re.compile(r"^\s*(\d+)\s*([dhm])\s*$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


class Age(click.ParamType):  # type: ignore[type-arg]
    """An age such as ``30d``, ``12h`` or ``90m``."""

    name = "age"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta):
            return value
        match = _AGE.match(str(value))
        if match is None:
            self.fail(
                f"{value!r} is not an age; use a whole number followed by d (days), h (hours) "
                "or m (minutes), e.g. 30d, 12h, 90m",
                param,
                ctx,
            )
        amount, unit = match.groups()
        return timedelta(**{_UNITS[unit]: int(amount)})


@contextmanager
def _store() -> Iterator[Store]:
    """A store for BEATFLOW_DATABASE_URL, closed after the command (a store error ends the
    command with its message: ``LazyGroup.invoke`` reports every BeatflowError)."""
    store = Store.from_settings(load_settings())
    try:
        yield store
    finally:
        store.close()


@click.group()
def db() -> None:
    """Manage the results database (BEATFLOW_DATABASE_URL)."""


@db.command()
@json_option
def upgrade(as_json: bool) -> None:
    """Upgrade the schema to this version's head revision (safe to run any number of times)."""
    with _store() as store:
        before = store.current_revision() if _exists(store) else None
        revision = store.upgrade()
        where = mask_url(store.url)
        if as_json:
            echo_json({"database": where, "from": before, "revision": revision})
        elif before == revision:
            click.echo(f"{where} already at revision {revision} (head)")
        else:
            click.echo(f"{where} upgraded from {before or 'empty'} to revision {revision} (head)")


@db.command()
@json_option
def current(as_json: bool) -> None:
    """Print the schema revision of the database and the one this code needs."""
    with _store() as store:
        revision = store.current_revision() if _exists(store) else None
        head = store.head_revision()
        if as_json:
            url = mask_url(store.url)
            echo_json({"database": url, "revision": revision, "head": head, "ok": revision == head})
            return
        state = "up to date" if revision == head else "behind: run `beatflow db upgrade`"
        click.echo(f"{mask_url(store.url)} at revision {revision or 'none'} (head {head}, {state})")


@db.command()
@click.option(
    "--older-than",
    "older_than",
    type=Age(),
    required=True,
    help="Delete finished DAG runs that ended, and consumed asset events created, longer ago "
    "than this: 30d, 12h or 90m.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="DAG runs (then asset events) deleted per transaction.",
)
@reason_option
@actor_option
@json_option
def prune(older_than: timedelta, batch_size: int, reason: str, actor: str, as_json: bool) -> None:
    """Delete finished DAG runs (with their task runs and dead letters) older than an age, and
    the asset events that old which every DAG scheduled on their asset has consumed."""
    from beatflow.runs.assets import asset_consumers

    age = _show(older_than)
    with _store() as store:
        store.check_schema()
        bag = runtime_or_exit().dagbag
        detail: dict[str, Any] = {"older_than": age, "reason": reason}
        kept = None
        if bag.errors:  # a DAG that did not load may be waiting for events: keep them all
            kept = (
                f"the dags folder has {len(bag.errors)} load error(s) (see `beatflow dags "
                "list`), and a DAG that did not load may consume them"
            )
            detail["asset_events_kept"] = kept
        runs = store.prune(
            older_than,
            batch_size=batch_size,
            audit=AuditNote(actor, "prune", detail) if kept else None,
        )
        events = None
        if kept is None:
            note = AuditNote(actor, "prune", {**detail, "deleted": runs})
            events = store.prune_asset_events(
                older_than, asset_consumers(bag), batch_size=batch_size, audit=note
            )
        if as_json:
            echo_json({"deleted": runs, "older_than": age, "asset_events_deleted": events,
                       "asset_events_kept": kept})  # fmt: skip
            return
        click.echo(f"deleted {runs} finished DAG run(s) that ended more than {age} ago")
        if kept is None:
            click.echo(f"deleted {events} consumed asset event(s) created more than {age} ago")
        else:
            click.echo(f"kept every asset event: {kept}", err=True)


def _show(age: timedelta) -> str:
    minutes = int(age.total_seconds()) // 60
    for unit, size in (("d", 1440), ("h", 60)):
        if minutes and minutes % size == 0:
            return f"{minutes // size}{unit}"
    return f"{minutes}m"


def _exists(store: Store) -> bool:
    """False for a SQLite file that does not exist yet (reading it would create it)."""
    from beatflow.store.engine import is_sqlite, sqlite_path

    path = sqlite_path(store.url) if is_sqlite(store.url) else None
    return path is None or path.exists()
