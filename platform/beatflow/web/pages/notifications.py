"""The notifications page: the notifier outbox newest first (read only, a viewer too), filtered
by DAG, state and event, as ``GET /api/v1/notifications`` gives it."""

from __future__ import annotations

from typing import Any, get_args
from urllib.parse import urlencode

from fastapi import Query, Request, Response

from beatflow.web.api.notifications import (
    NotificationEvent,
    NotificationState,
    list_notifications,
)
from beatflow.web.limits import ApiError
from beatflow.web.pages.base import PageUser, render, router

PAGE = 50
STATES: tuple[str, ...] = get_args(NotificationState)
EVENTS: tuple[str, ...] = get_args(NotificationEvent)


def _choice(value: str, allowed: tuple[str, ...], what: str) -> Any:
    """The form's value, None for its empty "any", or a 400 naming the choices."""
    if not value:
        return None
    if value not in allowed:
        raise ApiError(400, f"{what} must be one of {', '.join(allowed)}, got {value[:40]!r}")
    return value


@router.get("/notifications")
def notifications_page(
    request: Request,
    who: PageUser,
    dag_id: str = Query("", max_length=250),
    state: str = Query("", max_length=20),
    event: str = Query("", max_length=20),
    offset: int = Query(0, ge=0, le=1_000_000),
) -> Response:
    kept = {
        "dag_id": dag_id or None,  # the form's empty field: every DAG
        "state": _choice(state, STATES, "state"),
        "event": _choice(event, EVENTS, "event"),
    }
    data = list_notifications(
        request, dag_id=kept["dag_id"], run_id=None, state=kept["state"], event=kept["event"],
        limit=PAGE, offset=offset,
    )  # fmt: skip
    shown = {k: v for k, v in kept.items() if v}
    next_href = None
    if data["next_offset"] is not None:
        next_href = "/notifications?" + urlencode({**shown, "offset": data["next_offset"]})
    return render(
        request, "notifications.html", who, **data, filters=shown, next_href=next_href,
        states=STATES, events=EVENTS,
    )  # fmt: skip
