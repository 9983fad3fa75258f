"""The REST API under /api/v1 (JSON only; OpenAPI at /api/v1/openapi.json): DAGs, runs, task
runs with tries, tracebacks, result previews and logs, dead letters, the operator's verbs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from beatflow.states import DagRunState
from beatflow.store.records import TRIGGERS
from beatflow.web import actions, views
from beatflow.web.auth import Principal
from beatflow.web.deps import api_user, conf_from, field, json_body, only, runtime
from beatflow.web.limits import ApiError, check_id, check_limit

ApiUser = Annotated[Principal, Depends(api_user)]
JsonBody = Annotated[dict[str, Any], Depends(json_body)]

router = APIRouter(prefix="/api/v1", dependencies=[Depends(api_user)])

LOG_LINES = 5000


def _body(properties: dict[str, Any], example: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its JSON itself (for clear 400s)."""
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    content = {"application/json": {"schema": schema, "example": example}}
    return {"requestBody": {"required": False, "content": content}}


_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
TRIGGER_BODY = _body(
    {"conf": {"type": "object"}, "run_id": _STR, "reason": _STR},
    {"conf": {"limit": 10}, "reason": "nightly CI"},
)
CANCEL_BODY = _body({"reason": _STR, "terminate": _BOOL}, {"reason": "stuck", "terminate": False})
CLEAR_BODY = _body(
    {
        "tasks": {"type": "array", "items": _STR},
        "downstream": _BOOL,
        "only_failed": _BOOL,
        "reason": _STR,
    },
    {"tasks": ["load"], "downstream": True, "only_failed": False},
)
MARK_BODY = _body(
    {"state": {"enum": ["success", "failed"]}, "task_id": _STR, "reason": _STR},
    {"state": "success", "reason": "checked by hand"},
)


def _dag(request: Request, dag_id: str) -> Any:
    check_id(dag_id, "DAG id")
    with actions.api_errors():
        return runtime(request).dag(dag_id)


def _run(request: Request, dag_id: str, run_id: str) -> Any:
    _dag(request, dag_id)
    check_id(run_id, "run id")
    with actions.api_errors():
        run = runtime(request).store.get_dag_run(dag_id, run_id)
    if run is None:
        raise ApiError(404, f"no run {run_id!r} of DAG {dag_id!r}")
    return run


def _task(request: Request, dag_id: str, run_id: str, task_id: str, map_index: int) -> Any:
    _run(request, dag_id, run_id)
    check_id(task_id, "task id")
    with actions.api_errors():
        found = runtime(request).store.find_task_run(dag_id, run_id, task_id, map_index)
    if found is None:
        where = task_id if map_index < 0 else f"{task_id}[{map_index}]"
        raise ApiError(404, f"no task run {where} in run {run_id!r} of DAG {dag_id!r}")
    return found


def flower_link(request: Request, celery_task_id: str | None) -> str | None:
    if not celery_task_id:
        return None
    settings = runtime(request).settings
    base = settings.web_flower_url
    if not base:
        host = request.url.hostname or "127.0.0.1"
        base = f"{request.url.scheme}://{host}:{settings.flower_port}"
    return f"{base}/task/{celery_task_id}"


# ---------------------------------------------------------------------- health, DAGs


@router.get("/health")
def health(request: Request) -> dict[str, Any]:
    """The database answers and the dags folder loaded (broken modules are counted)."""
    rt = runtime(request)
    with actions.api_errors():
        revision = rt.store.current_revision()
    bag = rt.dagbag
    return {"status": "ok", "schema": revision, "dags": len(bag.dags), "broken": len(bag.errors)}


def dag_page(request: Request, q: str, offset: int, limit: int) -> dict[str, Any]:
    rt = runtime(request)
    bag = rt.dagbag
    ids = sorted(d for d in bag.dags if q.lower() in d.lower())
    page = ids[offset : offset + limit]
    with actions.api_errors():
        paused = rt.store.paused_dag_ids()
        last = rt.store.latest_dag_runs(page, views.LAST_RUNS)
    return {
        "dags": [views.dag_summary(bag.dags[d], d in paused, last[d]) for d in page],
        "total": len(ids),
        "next_offset": offset + limit if offset + limit < len(ids) else None,
        "errors": [views.load_error_json(e) for e in bag.errors],
    }


@router.get("/dags")
def list_dags(
    request: Request,
    q: str = Query("", max_length=250, description="substring of the DAG id"),
    offset: int = Query(0, ge=0),
    limit: int = Query(views.DAGS_PER_PAGE),
) -> dict[str, Any]:
    """DAGs (schedule, next run, paused, last runs) and broken modules with their errors."""
    return dag_page(request, q, offset, check_limit(limit))


@router.get("/dags/{dag_id}")
def get_dag(request: Request, dag_id: str) -> dict[str, Any]:
    """One DAG: tasks, edges (the graph), params, schedule, last runs."""
    dag = _dag(request, dag_id)
    rt = runtime(request)
    with actions.api_errors():
        paused = rt.store.is_paused(dag_id)
        last = rt.store.latest_dag_runs([dag_id], views.LAST_RUNS)[dag_id]
    return views.dag_detail(dag, paused, last)


@router.get("/dags/{dag_id}/grid")
def get_grid(request: Request, dag_id: str, runs: int = Query(views.GRID_RUNS)) -> dict[str, Any]:
    """Recent runs x tasks, coloured by state."""
    dag = _dag(request, dag_id)
    store = runtime(request).store
    with actions.api_errors():
        recent, _ = store.page_dag_runs(dag_id, limit=check_limit(runs))
        tasks = store.task_runs_of(dag_id, [r.run_id for r in recent])
    return views.grid(dag, recent, tasks)


@router.post("/dags/{dag_id}/pause")
def pause(request: Request, who: ApiUser, dag_id: str) -> dict[str, Any]:
    _dag(request, dag_id)
    actions.set_paused(runtime(request), who, dag_id, True)
    return {"dag_id": dag_id, "paused": True}


@router.post("/dags/{dag_id}/unpause")
def unpause(request: Request, who: ApiUser, dag_id: str) -> dict[str, Any]:
    _dag(request, dag_id)
    actions.set_paused(runtime(request), who, dag_id, False)
    return {"dag_id": dag_id, "paused": False}


# ---------------------------------------------------------------------- runs


def _check_filters(state: str | None, trigger: str | None) -> None:
    if state is not None and state not in {s.value for s in DagRunState}:
        known = ", ".join(s.value for s in DagRunState)
        raise ApiError(400, f"unknown state {state!r}; expected one of {known}")
    if trigger is not None and trigger not in TRIGGERS:
        raise ApiError(400, f"unknown trigger {trigger!r}; expected one of {sorted(TRIGGERS)}")


@router.get("/runs")
def list_runs(
    request: Request,
    dag_id: str | None = None,
    state: str | None = None,
    trigger: str | None = None,
    cursor: int | None = Query(None, ge=1, description="next_cursor of the previous page"),
    limit: int = Query(50),
) -> dict[str, Any]:
    """DAG runs newest first, filtered by DAG, state, trigger; keyset-paginated."""
    if dag_id is not None:
        _dag(request, dag_id)
    _check_filters(state, trigger)
    with actions.api_errors():
        runs, next_cursor = runtime(request).store.page_dag_runs(
            dag_id, state=state, trigger=trigger, before=cursor, limit=check_limit(limit)
        )
    return {"runs": [views.run_json(r) for r in runs], "next_cursor": next_cursor}


@router.get("/dags/{dag_id}/runs")
def list_dag_runs(
    request: Request,
    dag_id: str,
    state: str | None = None,
    trigger: str | None = None,
    cursor: int | None = Query(None, ge=1),
    limit: int = Query(50),
) -> dict[str, Any]:
    return list_runs(request, dag_id, state, trigger, cursor, limit)


@router.post("/dags/{dag_id}/runs", status_code=201, openapi_extra=TRIGGER_BODY)
def trigger_run(
    request: Request,
    who: ApiUser,
    body: JsonBody,
    dag_id: str,
) -> dict[str, Any]:
    """Start a run: body {"conf": {...}, "run_id": "...", "reason": "..."}; conf is checked
    against the DAG's params (every problem listed, nothing enqueued on a bad one)."""
    _dag(request, dag_id)
    only(body, "conf", "run_id", "reason")
    conf = conf_from(body.get("conf"))
    run_id = field(body, "run_id", str, None)
    reason = field(body, "reason", str, "")
    run = actions.trigger(runtime(request), who, dag_id, conf, run_id, reason[:500])
    return views.run_json(run)


@router.get("/dags/{dag_id}/runs/{run_id}")
def get_run(request: Request, dag_id: str, run_id: str) -> dict[str, Any]:
    """A run with its task runs (results left out: see the task run)."""
    run = _run(request, dag_id, run_id)
    with actions.api_errors():
        tasks = runtime(request).store.get_task_runs(dag_id, run_id)
    return views.run_detail(run, tasks)


@router.get("/dags/{dag_id}/runs/{run_id}/status")
def run_status(request: Request, dag_id: str, run_id: str) -> dict[str, Any]:
    """Small and cheap, for live pages: the run's state and each task's."""
    run = _run(request, dag_id, run_id)
    with actions.api_errors():
        tasks = runtime(request).store.get_task_runs(dag_id, run_id)
    return {
        "state": run.state,
        "final": run.state not in ("queued", "running"),
        "tasks": views.task_states(tasks),
        "instances": {
            f"{t.task_id}[{t.map_index}]" if t.map_index >= 0 else t.task_id: {
                "state": t.state,
                "try_number": t.try_number,
                "duration_seconds": t.duration_seconds,
            }
            for t in tasks
        },
    }


def _reason(body: dict[str, Any]) -> str:
    reason: str = field(body, "reason", str, "")
    return reason[:500]


@router.post("/dags/{dag_id}/runs/{run_id}/cancel", openapi_extra=CANCEL_BODY)
def cancel(
    request: Request,
    who: ApiUser,
    body: JsonBody,
    dag_id: str,
    run_id: str,
) -> dict[str, Any]:
    """Cancel a run: body {"reason": "...", "terminate": false}."""
    _run(request, dag_id, run_id)
    only(body, "reason", "terminate")
    terminate = field(body, "terminate", bool, False)
    run = actions.cancel(
        runtime(request), who, dag_id, run_id, reason=_reason(body), terminate=terminate
    )
    return views.run_json(run)


@router.post("/dags/{dag_id}/runs/{run_id}/clear", openapi_extra=CLEAR_BODY)
def clear(
    request: Request,
    who: ApiUser,
    body: JsonBody,
    dag_id: str,
    run_id: str,
) -> dict[str, Any]:
    """Run tasks again: body {"tasks": [...], "downstream": false, "only_failed": false}."""
    _run(request, dag_id, run_id)
    only(body, "tasks", "downstream", "only_failed", "reason")
    tasks = field(body, "tasks", list, [])
    if not all(isinstance(t, str) for t in tasks) or len(tasks) > 1000:
        raise ApiError(400, '"tasks" must be a list of at most 1000 task ids')
    run = actions.clear(
        runtime(request),
        who,
        dag_id,
        run_id,
        tasks=tasks,
        downstream=field(body, "downstream", bool, False),
        only_failed=field(body, "only_failed", bool, False),
        reason=_reason(body),
    )
    return views.run_json(run)


@router.post("/dags/{dag_id}/runs/{run_id}/mark", openapi_extra=MARK_BODY)
def mark(
    request: Request,
    who: ApiUser,
    body: JsonBody,
    dag_id: str,
    run_id: str,
) -> dict[str, Any]:
    """Set a run (or one task of it) to success or failed: body {"state": ..., "task_id": ...}."""
    _run(request, dag_id, run_id)
    only(body, "state", "task_id", "reason")
    state = field(body, "state", str, None)
    if state is None:
        raise ApiError(400, '"state" is required (success or failed)')
    run = actions.mark(
        runtime(request),
        who,
        dag_id,
        run_id,
        state=state,
        task_id=field(body, "task_id", str, None),
        reason=_reason(body),
    )
    return views.run_json(run)


# ---------------------------------------------------------------------- task runs


@router.get("/dags/{dag_id}/runs/{run_id}/tasks/{task_id}")
def get_task_run(
    request: Request, dag_id: str, run_id: str, task_id: str, map_index: int = Query(-1, ge=-1)
) -> dict[str, Any]:
    """A task run: state, tries, durations, error and traceback, a capped result preview."""
    t = _task(request, dag_id, run_id, task_id, map_index)
    return {**views.task_run_detail(t), "flower_url": flower_link(request, t.celery_task_id)}


@router.get("/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/tries")
def get_tries(
    request: Request, dag_id: str, run_id: str, task_id: str, map_index: int = Query(-1, ge=-1)
) -> dict[str, Any]:
    """Each try: when it logged (from the captured logs; read its lines with ``/logs``), and the
    latest try's state and error (earlier tries' outcomes are not stored: state null)."""
    t = _task(request, dag_id, run_id, task_id, map_index)
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


@router.get("/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/logs")
def get_logs(
    request: Request,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int = Query(-1, ge=-1),
    try_number: int | None = Query(None, ge=0),
) -> dict[str, Any]:
    """What the task run logged, per try (capped per try by BEATFLOW_TASK_LOG_MAX_BYTES)."""
    _task(request, dag_id, run_id, task_id, map_index)
    with actions.api_errors():
        lines = runtime(request).store.get_task_logs(
            dag_id, run_id, task_id, map_index, try_number=try_number, limit=LOG_LINES
        )
    return {"lines": lines, "truncated": len(lines) >= LOG_LINES}


# ---------------------------------------------------------------------- dead letters


@router.get("/dead-letters")
def list_dead_letters(
    request: Request,
    dag_id: str | None = None,
    include_replayed: bool = False,
    cursor: int | None = Query(None, ge=1),
    limit: int = Query(50),
) -> dict[str, Any]:
    """Dead letters newest first (replayed ones only if asked)."""
    if dag_id is not None:
        check_id(dag_id, "DAG id")
    with actions.api_errors():
        letters, next_cursor = runtime(request).store.page_dead_letters(
            dag_id, include_replayed=include_replayed, before=cursor, limit=check_limit(limit)
        )
    return {
        "dead_letters": [views.dead_letter(d, traceback=True) for d in letters],
        "next_cursor": next_cursor,
    }


@router.post("/dead-letters/{letter_id}/replay")
def replay(request: Request, who: ApiUser, letter_id: int) -> dict[str, Any]:
    """Run the dead letter's task again as a new try, then what did not run because of it."""
    if not 1 <= letter_id < 2**63:
        raise ApiError(400, "dead letter id out of range")
    run = actions.replay(runtime(request), who, letter_id)
    return views.run_json(run)


# ---------------------------------------------------------------------- audit


@router.get("/audit")
def list_audit(
    request: Request,
    dag_id: str | None = None,
    run_id: str | None = None,
    limit: int = Query(50),
) -> dict[str, Any]:
    """Who changed what, newest first (every change made through this API is recorded)."""
    if dag_id is not None:
        check_id(dag_id, "DAG id")
    if run_id is not None:
        check_id(run_id, "run id")
    with actions.api_errors():
        records = runtime(request).store.list_audit(dag_id, run_id, limit=check_limit(limit))
    return {
        "audit": [
            {
                "at": r.at.isoformat(),
                "actor": r.actor,
                "action": r.action,
                "dag_id": r.dag_id,
                "run_id": r.run_id,
                "detail": r.detail,
            }
            for r in records
        ]
    }
