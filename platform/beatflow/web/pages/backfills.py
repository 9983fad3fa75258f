"""A DAG page's backfills: the "Backfill…" form (a dry-run preview listing the runs it would
create or re-run, then the confirmation with a reason), the list of the DAG's backfills with
their runs by state, and their cancel."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Form, Request
from fastapi.responses import Response

from beatflow.errors import SchedulerError
from beatflow.records_json import backfill_json
from beatflow.runs import backfill as backfills
from beatflow.runtime import Runtime
from beatflow.web import actions
from beatflow.web.api.runs import queued_bound
from beatflow.web.deps import runtime
from beatflow.web.limits import ApiError, check_id
from beatflow.web.pages.base import PageUser, back, check_csrf, reason_given, render, router

SHOWN = 10


def backfill_context(rt: Runtime, dag_id: str) -> dict[str, Any]:
    """What the DAG page's backfill partial shows: the latest backfills, an empty form."""
    with actions.api_errors():
        latest = rt.store.list_backfills(dag_id, limit=SHOWN)
        shown = [backfill_json(b, backfills.backfill_progress(rt, b)) for b in latest]
    empty = {"backfill_form": None, "backfill_plan": None, "backfill_error": None}
    return {"backfills": shown, **empty}


def _page(request: Request, who: PageUser, dag_id: str, status: int, **more: Any) -> Response:
    from beatflow.web.pages.dags import _dag_context

    ctx = _dag_context(request, dag_id)
    ctx.update(more)
    return render(request, "dag.html", who, status=status, conf_text="{}", error=None, **ctx)


def _run(
    request: Request,
    who: PageUser,
    dag_id: str,
    form: dict[str, Any],
    *,
    dry_run: bool,
    reason: str,
) -> backfills.BackfillResult:
    start = queued_bound(form["start"], "start")
    end = queued_bound(form["end"], "end")
    if start is None or end is None:
        raise ApiError(400, "give a start and an end date")
    if end < start:
        raise ApiError(400, f"the end {form['end']} is before the start {form['start']}")
    with actions.api_errors():
        try:
            return backfills.start_backfill(
                runtime(request),
                dag_id,
                start,
                end,
                reprocess=form["reprocess"],
                max_active_runs=form["max_active_runs"],
                dry_run=dry_run,
                actor=who.actor,
                reason=reason,
            )
        except SchedulerError as exc:
            raise ApiError(400, str(exc)) from exc


def _form(start: str, end: str, reprocess: str, max_active_runs: str) -> dict[str, Any]:
    if reprocess not in backfills.REPROCESS:
        raise ApiError(400, f"reprocess must be one of {', '.join(backfills.REPROCESS)}")
    cap = max_active_runs.strip()
    if cap and (not cap.isdigit() or not 1 <= int(cap) <= 1000):
        raise ApiError(400, "max active runs must be a number from 1 to 1000, or empty")
    return {
        "start": start.strip(),
        "end": end.strip(),
        "reprocess": reprocess,
        "max_active_runs": int(cap) if cap else None,
    }


@router.post("/dags/{dag_id}/backfills/preview")
def preview_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    csrf_token: str = Form(""),
    start: str = Form("", max_length=40),
    end: str = Form("", max_length=40),
    reprocess: str = Form("none", max_length=20),
    max_active_runs: str = Form("", max_length=10),
) -> Response:
    """The dry run: the page again, with the plan and the confirmation form."""
    check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    form = {"start": start, "end": end, "reprocess": reprocess, "max_active_runs": None}
    try:
        form = _form(start, end, reprocess, max_active_runs)
        result = _run(request, who, dag_id, form, dry_run=True, reason="")
    except ApiError as exc:
        if exc.status != 400:
            raise
        return _page(request, who, dag_id, 400, backfill_form=form, backfill_error=exc.message)
    return _page(request, who, dag_id, 200, backfill_form=form, backfill_plan=result.plan)


@router.post("/dags/{dag_id}/backfills")
def start_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    csrf_token: str = Form(""),
    start: str = Form("", max_length=40),
    end: str = Form("", max_length=40),
    reprocess: str = Form("none", max_length=20),
    max_active_runs: str = Form("", max_length=10),
    reason: str = Form("", max_length=2000),
) -> Response:
    check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    form = _form(start, end, reprocess, max_active_runs)
    _run(request, who, dag_id, form, dry_run=False, reason=reason_given(reason))
    return back(f"/dags/{quote(dag_id)}#backfills")


@router.post("/dags/{dag_id}/backfills/{backfill_id}/cancel")
def cancel_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    backfill_id: int,
    csrf_token: str = Form(""),
    reason: str = Form("", max_length=2000),
) -> Response:
    check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    rt = runtime(request)
    with actions.api_errors():
        record = rt.store.get_backfill(backfill_id)
        if record is None or record.dag_id != dag_id:
            raise ApiError(404, f"no backfill {backfill_id} of DAG {dag_id!r}")
        backfills.cancel_backfill(rt, backfill_id, actor=who.actor, reason=reason_given(reason))
    return back(f"/dags/{quote(dag_id)}#backfills")
