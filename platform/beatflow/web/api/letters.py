"""/api/v1: dead letters, their replay and purge (admins only), the audit log."""

from __future__ import annotations

from typing import Any

from fastapi import Path, Query, Request

from beatflow.web import actions, models, ops_models, views
from beatflow.web.api.base import CONFLICT, AdminUser, ApiUser, router
from beatflow.web.deps import runtime
from beatflow.web.limits import check_id, check_limit


@router.get("/dead-letters", response_model=models.DeadLetterPage)
def list_dead_letters(
    request: Request,
    dag_id: str | None = Query(None, max_length=250),
    include_replayed: bool = False,
    cursor: int | None = Query(None, ge=1, lt=2**63),
    limit: int = Query(50, ge=1, le=200),
) -> dict[str, Any]:
    """Dead letters newest first (replayed and stale ones only if asked)."""
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


@router.post("/dead-letters/{letter_id}/replay", response_model=models.DagRun, responses=CONFLICT)
def replay(request: Request, who: ApiUser, letter_id: int = Path(ge=1, lt=2**63)) -> dict[str, Any]:
    """Run the dead letter's task again as new tries with its full retry policy, then what did
    not run because of it. A stale letter (its run marked, its task cleared, a newer letter of
    the same task run) is refused: 409 with the ``reason`` it was closed."""
    run = actions.replay(runtime(request), who, letter_id)
    return views.run_json(run)


@router.post("/dead-letters/purge", response_model=ops_models.Purged)
def purge(request: Request, who: AdminUser, body: models.PurgeBody) -> dict[str, Any]:
    """Delete the dead letters (of one DAG, or all): admins only, audited."""
    if body.dag_id is not None:
        check_id(body.dag_id, "DAG id")
    deleted = actions.purge_dead_letters(runtime(request), who, body.dag_id, body.reason[:500])
    return {"dag_id": body.dag_id, "deleted": deleted}


@router.get("/audit", response_model=models.AuditPage)
def list_audit(
    request: Request,
    dag_id: str | None = Query(None, max_length=250),
    run_id: str | None = Query(None, max_length=250),
    limit: int = Query(50, ge=1, le=200),
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
