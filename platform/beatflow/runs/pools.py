"""The operator's verbs on pools — set (create or resize) and delete — as the CLI, the web API
and the UI call them, each recorded in the audit table with who did it; and a pool as JSON."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from beatflow.dag.model import DAG
from beatflow.errors import BeatflowError
from beatflow.runtime import Runtime
from beatflow.store.engine import is_sqlite, sqlite_path
from beatflow.store.pools import PoolRecord, PoolWaiter
from beatflow.store.records import AuditNote

log = logging.getLogger(__name__)

POOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,250}")
MAX_SLOTS = 1_000_000


class PoolError(BeatflowError):
    """A pool verb's bad input (a name or a slot count)."""


def check_pool(name: str, slots: int | None = None) -> None:
    """Raise PoolError unless ``name`` (and ``slots``) can be a pool's."""
    if not POOL_NAME.fullmatch(name):
        raise PoolError(
            f"a pool's name is 1-250 letters, digits, '_', '.' and '-', got {name!r:.60}"
        )
    if slots is not None and not 0 <= slots <= MAX_SLOTS:
        raise PoolError(f"a pool's slots must be from 0 to {MAX_SLOTS}, got {slots}")


def set_pool(
    runtime: Runtime,
    name: str,
    slots: int,
    description: str | None = None,
    *,
    actor: str,
    reason: str = "",
) -> PoolRecord:
    """Create pool ``name`` with ``slots`` or resize it (effective at the next claim)."""
    check_pool(name, slots)
    note = AuditNote(actor, "pool_set", {"reason": reason})
    pool = runtime.store.set_pool(name, slots, description, audit=note)
    log.info("pool %s set to %d slots by %s", name, slots, actor)
    return pool


def delete_pool(runtime: Runtime, name: str, *, actor: str, reason: str = "") -> bool:
    """Delete pool ``name`` (its tasks that have not started fail, as Airflow's do); False if
    there was none."""
    check_pool(name)
    deleted = runtime.store.delete_pool(
        name, audit=AuditNote(actor, "pool_delete", {"reason": reason})
    )
    if deleted:
        log.warning("pool %s deleted by %s", name, actor)
    return deleted


def missing_pools(dags: Iterable[DAG], runtime: Runtime) -> list[str]:
    """``beatflow dags check``'s warnings: each task whose pool does not exist (it would fail
    when it runs), one line per pool; or why the pools could not be read. Not an error: a pool
    is the database's, and CI may check a dags folder before the pool is created (or with no
    database at all: a SQLite file that is not there is not created)."""
    wanted: dict[str, list[str]] = {}
    for dag in dags:
        for spec in dag.tasks.values():
            if spec.pool is not None:
                wanted.setdefault(spec.pool, []).append(f"{dag.dag_id}.{spec.task_id}")
    if not wanted:
        return []
    url = runtime.settings.database_url
    path = sqlite_path(url) if is_sqlite(url) else None
    if is_sqlite(url) and (path is None or not path.exists()):  # checking must not create it
        return [f"pools not checked (no results database at {path or 'an in-memory SQLite'})"]
    try:
        known = {p.name for p in runtime.store.list_pools()}
    except BeatflowError as exc:
        return [f"pools not checked (the results database could not be read: {exc})"]
    return [
        f"pool {name!r} does not exist, so {len(tasks)} task(s) would fail when they run "
        f"({', '.join(sorted(tasks)[:5])}{', ...' if len(tasks) > 5 else ''}): "
        f"create it with beatflow pools set {name} N"
        for name, tasks in sorted(wanted.items())
        if name not in known
    ]


def pool_json(p: PoolRecord) -> dict[str, Any]:
    return {
        "name": p.name,
        "slots": p.slots,
        "description": p.description,
        "used": p.used,
        "queued": p.queued,
        "free": p.free,
        "updated_at": p.updated_at.isoformat(),
    }


def waiter_json(w: PoolWaiter) -> dict[str, Any]:
    return {
        "task_id": w.task_id,
        "map_index": w.map_index,
        "pool": w.pool,
        "slots": w.slots,
        "since": w.since.isoformat(),
    }
