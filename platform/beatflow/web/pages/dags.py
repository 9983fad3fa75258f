"""The DAG list and a DAG's page (graph, grid, runs), its pause and trigger forms."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Form, Query, Request
from fastapi.responses import Response

from beatflow.web import actions, views
from beatflow.web.api import dag_page
from beatflow.web.deps import conf_from, runtime
from beatflow.web.graph import render_svg
from beatflow.web.limits import ApiError, check_id
from beatflow.web.pages.base import PageUser, back, check_csrf, render, router


@router.get("/")
def index(
    request: Request,
    who: PageUser,
    q: str = Query("", max_length=250),
    offset: int = Query(0, ge=0),
) -> Response:
    data = dag_page(request, q, offset, views.DAGS_PER_PAGE)
    return render(
        request, "dags.html", who, q=q, offset=offset, page_size=views.DAGS_PER_PAGE, **data
    )


def _dag_context(request: Request, dag_id: str) -> dict[str, Any]:
    check_id(dag_id, "DAG id")
    rt = runtime(request)
    with actions.api_errors():
        dag = rt.dag(dag_id)
        paused = rt.store.is_paused(dag_id)
        recent, next_cursor = rt.store.page_dag_runs(dag_id, limit=views.GRID_RUNS)
        tasks = rt.store.task_runs_of(dag_id, [r.run_id for r in recent])
    latest = recent[0] if recent else None
    states = views.task_states(t for t in tasks if latest and t.run_id == latest.run_id)
    links = (
        {
            t: f"/dags/{quote(dag_id)}/runs/{quote(latest.run_id, safe='')}/tasks/{quote(t)}"
            for t in states
        }
        if latest
        else {}
    )
    return {
        "dag": views.dag_detail(dag, paused, recent[: views.LAST_RUNS]),
        "svg": render_svg(dag, states, links),
        "latest": views.run_json(latest) if latest else None,
        "grid": views.grid(dag, recent, tasks),
        "runs": [views.run_json(r) for r in recent],
        "next_cursor": next_cursor,
    }


@router.get("/dags/{dag_id}")
def dag_page_view(request: Request, who: PageUser, dag_id: str) -> Response:
    return render(
        request, "dag.html", who, conf_text="{}", error=None, **_dag_context(request, dag_id)
    )


@router.post("/dags/{dag_id}/pause")
def pause_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    csrf_token: str = Form(""),
    paused: str = Form("true"),
) -> Response:
    check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    actions.set_paused(runtime(request), who, dag_id, paused == "true")
    return back(f"/dags/{quote(dag_id)}")


@router.post("/dags/{dag_id}/trigger")
def trigger_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    csrf_token: str = Form(""),
    conf: str = Form("{}", max_length=60_000),
) -> Response:
    check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    try:
        run = actions.trigger(runtime(request), who, dag_id, conf_from(conf.strip() or "{}"))
    except ApiError as exc:
        if exc.status not in (400, 409):
            raise
        problems = exc.extra.get("problems") or [exc.message]
        return render(
            request,
            "dag.html",
            who,
            status=400,
            conf_text=conf,
            error=problems,
            **_dag_context(request, dag_id),
        )
    return back(f"/dags/{quote(dag_id)}/runs/{quote(run.run_id, safe='')}")
