"""/api/v1/notifications: the notifier outbox, read only, newest first: each notifier event
(a task run's or a DAG run's success, failure, retry or skip), whether it was sent, after how
many tries, and why not. What any caller may read (a viewer too); nothing here changes it."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Query, Request
from pydantic import Field

from beatflow.store.notifications import NotificationRecord
from beatflow.web import actions
from beatflow.web.api.base import router
from beatflow.web.deps import runtime
from beatflow.web.limits import check_id, check_limit
from beatflow.web.models import Model, Timestamp

NotificationState = Literal["pending", "sending", "sent", "failed"]
NotificationEvent = Literal["success", "failure", "retry", "skipped"]
AnyState = Query(None, description="only the events in this state")
AnyEvent = Query(None, description="only this event")


class Notification(Model):
    event_key: str = Field(description="DAG/run/task (@dag: the run's end)/map index/try/event/"
                           "notifier: one event of one notifier, sent at most once")  # fmt: skip
    dag_id: str
    run_id: str
    task_id: str | None = Field(description="null: the DAG run's end")
    map_index: int
    try_number: int | None = Field(description="the try that ended (null: a skip, a run's end)")
    event: str = Field(description="success, failure, retry or skipped")
    notifier: int | None = Field(description="the notifier's place in its callback list")
    state: NotificationState = Field(
        description="pending (written, not yet taken), sending (taken by its one delivery), "
        "sent, or failed (its tries ran out: error says why)"
    )
    tries: int
    error: str | None
    created_at: Timestamp
    claimed_at: Timestamp | None = Field(description="when its delivery took it")
    ended_at: Timestamp | None


class NotificationPage(Model):
    notifications: list[Notification]
    next_offset: int | None = Field(description="the offset of the next page; null on the last")


def notification_json(n: NotificationRecord) -> dict[str, Any]:
    found = n.payload.get("context")
    context: dict[str, Any] = found if isinstance(found, dict) else {}
    index = n.payload.get("index")
    tried = context.get("try_number")
    mapped = context.get("map_index")
    return {
        "event_key": n.event_key,
        "dag_id": n.dag_id,
        "run_id": n.run_id,
        "task_id": context.get("task_id") or None,
        "map_index": mapped if isinstance(mapped, int) else -1,
        "try_number": tried if isinstance(tried, int) else None,
        "event": n.kind,
        "notifier": index if isinstance(index, int) else None,
        "state": n.state,
        "tries": n.tries,
        "error": n.error,
        "created_at": n.created_at.isoformat(),
        "claimed_at": n.claimed_at.isoformat() if n.claimed_at else None,
        "ended_at": n.ended_at.isoformat() if n.ended_at else None,
    }


@router.get("/notifications", response_model=NotificationPage)
def list_notifications(
    request: Request,
    dag_id: str | None = Query(None, max_length=250),
    run_id: str | None = Query(None, max_length=250),
    state: NotificationState | None = AnyState,
    event: NotificationEvent | None = AnyEvent,
    limit: int = Query(50, ge=1, le=200),
    offset: int = Query(0, ge=0, le=1_000_000),
) -> dict[str, Any]:
    """The notifier events newest first, of one DAG (one run), in one state (``failed``: the
    ones nobody was told of), of one event; ``limit`` per page from ``offset``."""
    if dag_id is not None:
        check_id(dag_id, "DAG id")
    if run_id is not None:
        check_id(run_id, "run id")
    with actions.api_errors():
        found, next_offset = runtime(request).store.page_notifications(
            dag_id=dag_id, run_id=run_id, state=state, kind=event, limit=check_limit(limit),
            offset=offset,
        )  # fmt: skip
    return {"notifications": [notification_json(n) for n in found], "next_offset": next_offset}
