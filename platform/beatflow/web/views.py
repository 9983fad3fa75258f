"""What the API returns and the pages show, built once from the runtime: DAG summaries (schedule
in words, next run, last runs), DAG detail (tasks, edges, params), the grid of runs x tasks, run
and task-run detail. Plain dicts of JSON values."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from beatflow.dag import groups
from beatflow.dag.assets import schedule_text
from beatflow.dag.loader import LoadError
from beatflow.dag.model import DAG
from beatflow.dag.render import levels
from beatflow.records_json import dag_run_json, dead_letter_json, task_run_json
from beatflow.states import TaskRunState
from beatflow.store import DagRunRecord, DeadLetterRecord, SensorPokes, TaskRunRecord
from beatflow.web.schedule_words import schedule_words

RESULT_PREVIEW_BYTES = 4096
LAST_RUNS = 10
DAGS_PER_PAGE = 50
GRID_RUNS = 25

# worst first: what a mapped task's cell shows when its instances differ
_SEVERITY = [
    "failed",
    "upstream_failed",
    "cancelled",
    "running",
    "up_for_retry",
    "cleared",
    "up_for_reschedule",
    "queued",
    "skipped",
    "success",
]


# dag_id -> (schedule, asked at, next tick): no tick lies between the two, so the tick stays the
# next one for any instant in [asked at, tick): the DAG list does not run croniter per DAG per view
_NEXT_TICKS: dict[str, tuple[object, datetime, datetime]] = {}


def next_run(dag: DAG, paused: bool, now: datetime | None = None) -> datetime | None:
    if dag.schedule is None or paused:
        return None
    now = now or datetime.now(UTC)
    start = dag.start_date
    after = max(now, start) if start is not None and start.tzinfo is not None else now
    cached = _NEXT_TICKS.get(dag.dag_id)
    if cached is not None and cached[0] is dag.schedule and cached[1] <= after < cached[2]:
        tick = cached[2]
    else:
        tick = dag.schedule.next_after(after)
        _NEXT_TICKS[dag.dag_id] = (dag.schedule, after, tick)
    if dag.end_date is not None and dag.end_date.tzinfo is not None and tick > dag.end_date:
        return None
    return tick


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


class RunLike(Protocol):
    @property
    def run_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def queued_at(self) -> datetime: ...


def dag_summary(dag: DAG, paused: bool, last_runs: Sequence[RunLike]) -> dict[str, Any]:
    return {
        "dag_id": dag.dag_id,
        "description": dag.description,
        "schedule": schedule_text(dag.schedule, dag.asset_schedule),
        "schedule_words": (
            f"scheduled on assets: {dag.asset_schedule.describe()}"
            if dag.asset_schedule is not None
            else schedule_words(dag.schedule)
        ),
        "timezone": dag.timezone.key,
        "next_run": _iso(next_run(dag, paused)),
        "paused": paused,
        "tags": list(dag.tags),
        "tasks": len(dag.tasks),
        "file": dag.file,
        "line": dag.line,
        "last_runs": [
            {"run_id": r.run_id, "state": r.state, "queued_at": _iso(r.queued_at)}
            for r in last_runs
        ],
    }


def load_error_json(err: LoadError) -> dict[str, Any]:
    return {"file": err.file, "line": err.line, "dag_id": err.dag_id, "error": err.message}


def dag_detail(dag: DAG, paused: bool, last_runs: Sequence[RunLike]) -> dict[str, Any]:
    depth = levels(dag)
    return {
        **dag_summary(dag, paused, last_runs),
        "max_active_runs": dag.max_active_runs,
        "catchup": dag.catchup,
        "params": [
            {
                "name": name,
                "type": p.type_name(),
                "required": p.required,
                "default": p.default if _is_json(p.default) else repr(p.default),
                "description": p.description,
                "title": p.title or None,
                "schema": p.schema(),
            }
            for name, p in dag.params.items()
        ],
        "tasks": [
            {
                "task_id": tid,
                "upstream": sorted(spec.upstream),
                "level": depth[tid],
                "trigger_rule": spec.trigger_rule,
                "mapped_over": spec.map_over,
                "control": spec.control,
                "retries": spec.retry.retries,
                "queue": spec.queue,
            }
            for tid, spec in dag.tasks.items()
        ],
        "groups": [
            {
                "group_id": gid,
                "parent": g.parent,
                "tooltip": g.tooltip,
                "tasks": groups.members(dag, gid),
            }
            for gid, g in dag.groups.items()
        ],
        "edges": [
            {"from": up, "to": tid, "kind": "data" if up in spec.data_upstream else "order"}
            for tid, spec in dag.tasks.items()
            for up in sorted(spec.upstream)
        ],
    }


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def worst(states: Iterable[str]) -> str:
    found = set(states)
    for state in _SEVERITY:
        if state in found:
            return state
    return next(iter(found), "none")


def task_states(tasks: Iterable[TaskRunRecord]) -> dict[str, str]:
    """task_id -> state (a mapped task: the worst state among its instances)."""
    by_task: dict[str, list[str]] = {}
    for t in tasks:
        by_task.setdefault(t.task_id, []).append(t.state)
    return {tid: worst(states) for tid, states in by_task.items()}


def grid(dag: DAG, runs: Sequence[DagRunRecord], tasks: Sequence[TaskRunRecord]) -> dict[str, Any]:
    """Rows: tasks in topological order; columns: runs oldest to newest; cells: states."""
    by_run: dict[str, list[TaskRunRecord]] = {}
    for t in tasks:
        by_run.setdefault(t.run_id, []).append(t)
    ordered = list(reversed(runs))
    states = {r.run_id: task_states(by_run.get(r.run_id, [])) for r in ordered}
    longest = max((r.duration_seconds or 0.0 for r in ordered), default=0.0)
    owner = groups.group_of(dag)
    rows = groups.tree_order(dag, dag.topological_order())
    return {
        "runs": [
            {
                "run_id": r.run_id,
                "state": r.state,
                "when": _iso(r.logical_date or r.queued_at),
                "duration_seconds": r.duration_seconds,
                "height": _bar_height(r.duration_seconds, longest),
            }
            for r in ordered
        ],
        "tasks": [
            {
                "task_id": tid,
                "states": [states[r.run_id].get(tid, "none") for r in ordered],
                "group": owner.get(tid),
                "depth": depth,
            }
            for kind, tid, depth in rows
            if kind == "task"
        ],
        # the grid's rows, groups heading their tasks: (kind, id, depth)
        "rows": [{"kind": k, "id": i, "depth": d} for k, i, d in rows],
    }


BAR_PX = 44  # the tallest duration bar over the grid's columns


def _bar_height(seconds: float | None, longest: float) -> int:
    """A run's duration as a bar over the grid's column, in pixels (the longest shown: 44)."""
    if not seconds or longest <= 0:
        return 0
    return max(2, round(seconds / longest * BAR_PX))


def result_preview(value: Any, limit: int = RESULT_PREVIEW_BYTES) -> dict[str, Any]:
    text = json.dumps(value, default=str, ensure_ascii=False)  # text as written, not \u00e9
    size = len(text.encode())
    if size <= limit:
        return {"preview": text, "bytes": size, "truncated": False}
    return {
        "preview": text.encode()[:limit].decode(errors="ignore"),
        "bytes": size,
        "truncated": True,
    }


def task_run_detail(t: TaskRunRecord) -> dict[str, Any]:
    out = task_run_json(t)
    out.pop("result", None)
    out.update(
        {
            "dag_id": t.dag_id,
            "run_id": t.run_id,
            "celery_task_id": t.celery_task_id,
            "traceback": t.traceback,
            "result": result_preview(t.result),
        }
    )
    return out


def sensor_pokes(t: TaskRunRecord, pokes: SensorPokes | None) -> dict[str, Any]:
    """A reschedule-mode sensor's pokes of its current try: how many were not done, the first
    (its timeout runs from it) and, while it waits, the next; nulls for any other task run."""
    if pokes is None or pokes.try_number != t.try_number:
        return {"poke_count": None, "first_poke_at": None, "next_poke_at": None}
    waiting = t.state == TaskRunState.UP_FOR_RESCHEDULE
    return {
        "poke_count": pokes.poke_count,
        "first_poke_at": pokes.first_poke_at.isoformat(),
        "next_poke_at": pokes.next_poke_at.isoformat() if waiting else None,
    }


def run_detail(run: DagRunRecord, tasks: Sequence[TaskRunRecord]) -> dict[str, Any]:
    return {**dag_run_json(run), "tasks": [task_run_json(t) | {"result": None} for t in tasks]}


def run_json(run: DagRunRecord) -> dict[str, Any]:
    return dag_run_json(run)


def dead_letter(d: DeadLetterRecord, traceback: bool = False) -> dict[str, Any]:
    return dead_letter_json(d, traceback=traceback)
