"""The JSON shapes of records, shared by the CLI's `--json` output and the web API: a stable,
documented contract (see README, "CLI"); and ``loads_bounded``, the one parser for JSON that
comes from outside (bounded in size and nesting, so no input can make it recurse away)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from beatflow.errors import JsonLimitError


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def backfill_json(b: Any, progress: dict[str, int]) -> dict[str, Any]:
    """A backfill (``store.backfills.BackfillRecord``) with its runs counted by state."""
    return {
        "id": b.id,
        "dag_id": b.dag_id,
        "state": b.state,
        "start": _iso(b.start),
        "end": _iso(b.end),
        "reprocess": b.reprocess,
        "max_active_runs": b.max_active_runs,
        "actor": b.actor,
        "reason": b.reason,
        "created_at": _iso(b.created_at),
        "ended_at": _iso(b.ended_at),
        "runs_total": len(b.plan),
        "released": b.released,
        "progress": progress,
    }


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
        "tries_before": t.tries_before,
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
        "closed_at": _iso(d.closed_at),
        "closed_reason": d.closed_reason,
    }
    if traceback:
        out["traceback"] = d.traceback
    return out


# ---------------------------------------------------------------------- bounded parsing

MAX_JSON_DEPTH = 64  # nesting of objects and arrays: far above any real conf, far below recursion
MAX_JSON_BYTES = 64 * 1024

# a JSON string (skipped whole, so brackets inside strings do not count; an unterminated one
# runs to the end, and nothing backtracks: linear time whatever the input) or one bracket
_TOKENS = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)


def json_depth(text: str) -> int:
    """The deepest nesting of objects and arrays in ``text`` (a linear scan, no recursion;
    well-formedness is left to the parser)."""
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
    return deepest


def loads_bounded(
    data: str | bytes,
    *,
    max_depth: int = MAX_JSON_DEPTH,
    max_bytes: int = MAX_JSON_BYTES,
    what: str = "JSON",
) -> Any:
    """``json.loads`` for input from outside (request bodies, forms, the CLI's conf, message
    bodies): JsonLimitError, naming the limit, for input over ``max_bytes`` or nested deeper
    than ``max_depth``; ValueError (json.JSONDecodeError, UnicodeDecodeError) for bad JSON.
    Never a RecursionError however the input is built."""
    size = len(data) if isinstance(data, bytes) else len(data.encode(errors="surrogatepass"))
    if size > max_bytes:
        raise JsonLimitError(
            f"{what} is {size} bytes, over the limit of {max_bytes} bytes", limit=max_bytes
        )
    text = data.decode() if isinstance(data, bytes) else data
    depth = json_depth(text)
    if depth > max_depth:
        raise JsonLimitError(
            f"{what} is nested {depth} levels deep, over the limit of {max_depth} levels",
            limit=max_depth,
        )
    return json.loads(text)
