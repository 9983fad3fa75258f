"""/api/v1: DAG runs (list, trigger, detail, live status) and the operator's verbs on a run
(cancel, clear, mark)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from fastapi import Query, Request

from beatflow.states import DagRunState
from beatflow.store.records import TRIGGERS
from beatflow.times import parse_instant
from beatflow.web import actions, models, views
from beatflow.web.api.base import CONFLICT, TOO_LARGE, ApiUser, dag_of, router, run_of
from beatflow.web.deps import conf_from, runtime
from beatflow.web.limits import ApiError, check_id, check_limit

VERB: dict[int | str, dict[str, Any]] = {**CONFLICT, **TOO_LARGE}
REASON_CHARS = 500
# what an empty body means
NO_TRIGGER_BODY = models.TriggerBody()
NO_CANCEL_BODY = models.CancelBody()
NO_CLEAR_BODY = models.ClearBody()


def _check_filters(state: str | None, trigger: str | None) -> None:
    if state is not None and state not in {s.value for s in DagRunState}:
        known = ", ".join(s.value for s in DagRunState)
        raise ApiError(400, f"unknown state {state!r}; expected one of {known}")
    if trigger is not None and trigger not in TRIGGERS:
        raise ApiError(400, f"unknown trigger {trigger!r}; expected one of {sorted(TRIGGERS)}")


def queued_bound(text: str | None, name: str, *, end_of_day: bool = False) -> datetime | None:
    """``since``/``until`` as a UTC instant: an ISO date or date-time (UTC unless it has an
    offset); a bare date as ``until`` takes in that whole day."""
    if not text:
        return None
    try:
        instant = parse_instant(text)
    except ValueError:
        raise ApiError(
            400, f"{name} must be an ISO date or date-time (2026-12-06 or 2026-12-06T08:00Z)"
        ) from None
    return instant + timedelta(days=1) if end_of_day and len(text) == 10 else instant


SEARCH = Query(None, max_length=250, description="part of the run id (matched literally)")
SINCE = Query(None, max_length=40, description="queued at or after (ISO date or date-time)")
UNTIL = Query(None, max_length=40, description="queued before (a bare date: through that day)")


@router.get("/runs", response_model=models.RunPage)
def list_runs(
    request: Request,
    dag_id: str | None = Query(None, max_length=250),
    state: str | None = Query(None, max_length=50),
    trigger: str | None = Query(None, max_length=50),
    cursor: int | None = Query(None, ge=1, lt=2**63, description="next_cursor of the last page"),
    limit: int = Query(50, ge=1, le=200),
    search: str | None = SEARCH,
    since: str | None = SINCE,
    until: str | None = UNTIL,
) -> dict[str, Any]:
    """DAG runs newest first, filtered by DAG, state, trigger, a part of the run id and the
    time they were queued; keyset-paginated."""
    if dag_id is not None:
        dag_of(request, dag_id)
    _check_filters(state, trigger)
    since_at = queued_bound(since, "since")
    until_at = queued_bound(until, "until", end_of_day=True)
    with actions.api_errors():
        runs, next_cursor = runtime(request).store.page_dag_runs(
            dag_id,
            state=state,
            trigger=trigger,
            run_id_contains=search or None,
            queued_since=since_at,
            queued_until=until_at,
            before=cursor,
            limit=check_limit(limit),
        )
    return {"runs": [views.run_json(r) for r in runs], "next_cursor": next_cursor}


@router.get("/dags/{dag_id}/runs", response_model=models.RunPage)
def list_dag_runs(
    request: Request,
    dag_id: str,
    state: str | None = Query(None, max_length=50),
    trigger: str | None = Query(None, max_length=50),
    cursor: int | None = Query(None, ge=1, lt=2**63),
    limit: int = Query(50, ge=1, le=200),
    search: str | None = SEARCH,
    since: str | None = SINCE,
    until: str | None = UNTIL,
) -> dict[str, Any]:
    """The DAG's runs newest first (as /runs?dag_id=)."""
    return list_runs(request, dag_id, state, trigger, cursor, limit, search, since, until)


@router.post("/dags/{dag_id}/runs", status_code=201, response_model=models.DagRun, responses=VERB)
def trigger_run(
    request: Request, who: ApiUser, dag_id: str, body: models.TriggerBody = NO_TRIGGER_BODY
) -> dict[str, Any]:
    """Start a run; conf is checked against the DAG's params (every problem listed, nothing
    enqueued on a bad one)."""
    dag_of(request, dag_id)
    conf = conf_from(body.conf)
    reason = body.reason[:REASON_CHARS]
    run = actions.trigger(runtime(request), who, dag_id, conf, body.run_id, reason)
    return views.run_json(run)


@router.get("/dags/{dag_id}/runs/{run_id}", response_model=models.RunDetail)
def get_run(request: Request, dag_id: str, run_id: str) -> dict[str, Any]:
    """A run with its task runs (results left out: see the task run)."""
    run = run_of(request, dag_id, run_id)
    with actions.api_errors():
        tasks = runtime(request).store.get_task_runs(dag_id, run_id)
    return views.run_detail(run, tasks)


@router.get("/dags/{dag_id}/runs/{run_id}/status", response_model=models.RunStatus)
def run_status(request: Request, dag_id: str, run_id: str) -> dict[str, Any]:
    """Small and cheap, for live pages: the run's state and each task's."""
    run = run_of(request, dag_id, run_id)
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


@router.post("/dags/{dag_id}/runs/{run_id}/cancel", response_model=models.DagRun, responses=VERB)
def cancel(
    request: Request,
    who: ApiUser,
    dag_id: str,
    run_id: str,
    body: models.CancelBody = NO_CANCEL_BODY,
) -> dict[str, Any]:
    """Cancel a run (terminate: also stop its running task runs)."""
    run_of(request, dag_id, run_id)
    reason = body.reason[:REASON_CHARS]
    run = actions.cancel(
        runtime(request), who, dag_id, run_id, reason=reason, terminate=body.terminate
    )
    return views.run_json(run)


@router.post("/dags/{dag_id}/runs/{run_id}/clear", response_model=models.DagRun, responses=VERB)
def clear(
    request: Request,
    who: ApiUser,
    dag_id: str,
    run_id: str,
    body: models.ClearBody = NO_CLEAR_BODY,
) -> dict[str, Any]:
    """Run tasks again as new tries (none named: every task; downstream: what follows too)."""
    run_of(request, dag_id, run_id)
    for task_id in body.tasks:
        check_id(task_id, "task id")
    run = actions.clear(
        runtime(request),
        who,
        dag_id,
        run_id,
        tasks=body.tasks,
        downstream=body.downstream,
        only_failed=body.only_failed,
        reason=body.reason[:REASON_CHARS],
    )
    return views.run_json(run)


@router.post("/dags/{dag_id}/runs/{run_id}/mark", response_model=models.DagRun, responses=VERB)
def mark(
    request: Request, who: ApiUser, dag_id: str, run_id: str, body: models.MarkBody
) -> dict[str, Any]:
    """Set a run (or one task of it) to success or failed."""
    run_of(request, dag_id, run_id)
    run = actions.mark(
        runtime(request),
        who,
        dag_id,
        run_id,
        state=body.state,
        task_id=body.task_id,
        reason=body.reason[:REASON_CHARS],
    )
    return views.run_json(run)
