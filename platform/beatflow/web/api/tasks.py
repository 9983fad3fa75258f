"""/api/v1: task runs (detail with a result preview, tries, logs)."""

from __future__ import annotations

from typing import Any

from fastapi import Query, Request

from beatflow.web import actions, models, views
from beatflow.web.api.base import LOG_LINES, flower_link, router, task_of
from beatflow.web.deps import runtime

MapIndex = Query(-1, ge=-1, lt=2**31)


@router.get("/dags/{dag_id}/runs/{run_id}/tasks/{task_id}", response_model=models.TaskRunDetail)
def get_task_run(
    request: Request, dag_id: str, run_id: str, task_id: str, map_index: int = MapIndex
) -> dict[str, Any]:
    """A task run: state, tries, durations, error and traceback, a capped result preview, and a
    sensor's pokes (reschedule mode: the first poke, and the next while it waits)."""
    t = task_of(request, dag_id, run_id, task_id, map_index)
    with actions.api_errors():
        pokes = runtime(request).store.sensor_pokes(t.dedupe_key)
    return {
        **views.task_run_detail(t),
        **views.sensor_pokes(t, pokes),
        "flower_url": flower_link(request, t.celery_task_id),
    }


@router.get("/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/tries", response_model=models.Tries)
def get_tries(
    request: Request, dag_id: str, run_id: str, task_id: str, map_index: int = MapIndex
) -> dict[str, Any]:
    """Each try: when it logged (from the captured logs; read its lines with ``/logs``), and the
    latest try's state and error (earlier tries' outcomes are not stored: state null)."""
    t = task_of(request, dag_id, run_id, task_id, map_index)
    with actions.api_errors():
        logged = runtime(request).store.task_log_tries(dag_id, run_id, task_id, map_index)
    tries = {n["try_number"]: dict(n) for n in logged}
    for n in range(1, t.try_number + 1):
        tries.setdefault(n, {"try_number": n, "first_log_at": None, "last_log_at": None})
    for n, entry in tries.items():
        latest = n == t.try_number
        entry["state"] = t.state if latest else None  # only the latest try's outcome is kept
        entry["error"] = t.error if latest else None
        for key in ("first_log_at", "last_log_at"):
            value = entry.get(key)
            entry[key] = value.isoformat() if value is not None else None
        entry.pop("batches", None)
    return {"tries": [tries[n] for n in sorted(tries)], "latest": t.try_number}


@router.get("/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/logs", response_model=models.Logs)
def get_logs(
    request: Request,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int = MapIndex,
    try_number: int | None = Query(None, ge=0, lt=2**31),
) -> dict[str, Any]:
    """What the task run logged, per try (capped per try by BEATFLOW_TASK_LOG_MAX_BYTES)."""
    task_of(request, dag_id, run_id, task_id, map_index)
    with actions.api_errors():
        lines = runtime(request).store.get_task_logs(
            dag_id, run_id, task_id, map_index, try_number=try_number, limit=LOG_LINES
        )
    return {"lines": lines, "truncated": len(lines) >= LOG_LINES}
