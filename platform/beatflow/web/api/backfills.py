"""/api/v1: a DAG's backfills — start one (or a dry run of it), list them, read one with its
runs counted by state, cancel one."""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response

from beatflow.errors import SchedulerError
from beatflow.records_json import backfill_json
from beatflow.runs import backfill as backfills
from beatflow.runtime import Runtime
from beatflow.store.backfills import BackfillRecord
from beatflow.web import actions, ops_models, views
from beatflow.web.api.base import CONFLICT, TOO_LARGE, ApiUser, dag_of, router
from beatflow.web.api.runs import REASON_CHARS, queued_bound
from beatflow.web.deps import runtime
from beatflow.web.limits import ApiError

VERB: dict[int | str, dict[str, Any]] = {**CONFLICT, **TOO_LARGE}
NO_CANCEL_BODY = ops_models.BackfillCancelBody()


def _json(rt: Runtime, record: BackfillRecord) -> dict[str, Any]:
    return backfill_json(record, backfills.backfill_progress(rt, record))


def _backfill_of(request: Request, dag_id: str, backfill_id: int) -> BackfillRecord:
    dag_of(request, dag_id)
    with actions.api_errors():
        record = runtime(request).store.get_backfill(backfill_id)
    if record is None or record.dag_id != dag_id:
        raise ApiError(404, f"no backfill {backfill_id} of DAG {dag_id!r}")
    return record


@router.post(
    "/dags/{dag_id}/backfills",
    status_code=201,
    response_model=ops_models.BackfillCreated,
    responses={
        **VERB,
        200: {
            "model": ops_models.BackfillCreated,
            "description": "a dry run's plan (nothing made)",
        },
    },
)
def create_backfill(
    request: Request,
    response: Response,
    who: ApiUser,
    dag_id: str,
    body: ops_models.BackfillBody,
) -> dict[str, Any]:
    """Create the runs of the DAG's ticks from start to end (201), or with dry_run answer the
    runs it would create or re-run (200). 400 for a bad range, a range of too many ticks, a
    DAG without a schedule, or a conf the params refuse."""
    dag_of(request, dag_id)
    start = queued_bound(body.start, "start")
    end = queued_bound(body.end, "end")
    assert start is not None and end is not None
    rt = runtime(request)
    with actions.api_errors():
        try:
            result = backfills.start_backfill(
                rt,
                dag_id,
                start,
                end,
                reprocess=body.reprocess,
                max_active_runs=body.max_active_runs,
                conf=body.conf,
                dry_run=body.dry_run,
                actor=who.actor,
                reason=body.reason[:REASON_CHARS],
            )
        except SchedulerError as exc:
            raise ApiError(400, str(exc)) from exc
    if body.dry_run:
        response.status_code = 200
    return {
        "dry_run": body.dry_run,
        "backfill": None if result.backfill is None else _json(rt, result.backfill),
        "plan": result.plan,
        "runs": [views.run_json(r) for r in result.runs],
    }


@router.get("/dags/{dag_id}/backfills", response_model=ops_models.BackfillPage)
def list_backfills(request: Request, dag_id: str) -> dict[str, Any]:
    """The DAG's latest backfills, newest first, with their runs counted by state."""
    dag_of(request, dag_id)
    rt = runtime(request)
    with actions.api_errors():
        return {"backfills": [_json(rt, b) for b in rt.store.list_backfills(dag_id)]}


@router.get("/dags/{dag_id}/backfills/{backfill_id}", response_model=ops_models.Backfill)
def get_backfill(request: Request, dag_id: str, backfill_id: int) -> dict[str, Any]:
    """One backfill with its runs counted by state."""
    record = _backfill_of(request, dag_id, backfill_id)
    with actions.api_errors():
        return _json(runtime(request), record)


@router.post(
    "/dags/{dag_id}/backfills/{backfill_id}/cancel",
    response_model=ops_models.Backfill,
    responses=VERB,
)
def cancel_backfill(
    request: Request,
    who: ApiUser,
    dag_id: str,
    backfill_id: int,
    body: ops_models.BackfillCancelBody = NO_CANCEL_BODY,
) -> dict[str, Any]:
    """Stop the backfill: no more of its runs are released, those queued or running are
    cancelled (409 when it has ended)."""
    _backfill_of(request, dag_id, backfill_id)
    rt = runtime(request)
    with actions.api_errors():
        record = backfills.cancel_backfill(
            rt, backfill_id, actor=who.actor, reason=body.reason[:REASON_CHARS]
        )
        return _json(rt, record)
