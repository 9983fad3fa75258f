"""The JSON shapes of records, shared by the CLI's `--json` output and the web API: a stable,
documented contract (see README, "CLI")."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def dag_run_json(r: Any) -> dict[str, Any]:
    return {
        "dag_id": r.dag_id,
        "run_id": r.run_id,
        "logical_date": _iso(r.logical_date),
        "trigger": r.trigger,
        "state": r.state,
        "conf": r.conf,
        "queued_at": _iso(r.queued_at),
        "started_at": _iso(r.started_at),
        "ended_at": _iso(r.ended_at),
        "duration_seconds": r.duration_seconds,
        "leader_epoch": r.leader_epoch,
    }


def task_run_json(t: Any) -> dict[str, Any]:
    return {
        "task_id": t.task_id,
        "map_index": t.map_index,
        "state": t.state,
        "try_number": t.try_number,
        "dedupe_key": t.dedupe_key,
        "worker": t.worker,
        "started_at": _iso(t.started_at),
        "ended_at": _iso(t.ended_at),
        "duration_seconds": t.duration_seconds,
        "result": t.result,
        "error": t.error,
    }


def dead_letter_json(d: Any, *, traceback: bool = False) -> dict[str, Any]:
    out = {
        "id": d.id,
        "dedupe_key": d.dedupe_key,
        "dag_id": d.dag_id,
        "run_id": d.run_id,
        "task_id": d.task_id,
        "map_index": d.map_index,
        "tries": d.tries,
        "error": d.error,
        "args": d.args,
        "conf": d.conf,
        "created_at": _iso(d.created_at),
        "replayed_at": _iso(d.replayed_at),
    }
    if traceback:
        out["traceback"] = d.traceback
    return out
