"""The DAG list and a DAG's page (graph, grid, runs), its pause and trigger forms."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Form, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from beatflow.web import actions, graph, params_form, views
from beatflow.web.api import dag_page
from beatflow.web.deps import conf_from, runtime
from beatflow.web.limits import ApiError, check_id
from beatflow.web.pages.backfills import backfill_context
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


def _dag_context(request: Request, dag_id: str, collapsed: str = "") -> dict[str, Any]:
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
    shut = graph.parse_collapsed(dag, collapsed)
    path = f"/dags/{quote(dag_id)}"
    toggle = graph.toggler(path, "graph", shut)
    return {
        "dag": views.dag_detail(dag, paused, recent[: views.LAST_RUNS]),
        "svg": graph.render_svgs(dag, states, links, collapsed=shut, toggle=toggle),
        "groups": graph.group_controls(dag, shut, path, "graph"),
        "fields": params_form.fields(dag),
        "latest": views.run_json(latest) if latest else None,
        "grid": views.grid(dag, recent, tasks),
        "runs": [views.run_json(r) for r in recent],
        "next_cursor": next_cursor,
        **backfill_context(rt, dag_id),
    }


@router.get("/dags/{dag_id}")
def dag_page_view(
    request: Request, who: PageUser, dag_id: str, collapsed: str = Query("", max_length=4000)
) -> Response:
    return render(
        request,
        "dag.html",
        who,
        conf_text="{}",
        error=None,
        raw_open=False,
        **_dag_context(request, dag_id, collapsed),
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


MAX_FIELD = 60_000  # characters of one posted field (the raw conf, or one param's text)


@router.post("/dags/{dag_id}/trigger")
async def trigger_form(request: Request, who: PageUser, dag_id: str) -> Response:
    # the fields depend on the DAG's params: read the whole form, then work off the event loop
    form = await request.form()
    posted = {k: v for k, v in form.items() if isinstance(v, str)}
    if any(len(v) > MAX_FIELD for v in posted.values()):
        raise ApiError(400, f"a form field is longer than {MAX_FIELD} characters")
    return await run_in_threadpool(_trigger, request, who, dag_id, posted)


def _trigger(request: Request, who: PageUser, dag_id: str, posted: dict[str, str]) -> Response:
    check_csrf(request, who, posted.get("csrf_token", ""))
    check_id(dag_id, "DAG id")
    rt = runtime(request)
    with actions.api_errors():
        dag = rt.dag(dag_id)
    conf_text = posted.get("conf", "{}")
    raw: dict[str, str] | None = None
    field_errors: dict[str, str] = {}
    conf: dict[str, Any] | None
    try:
        if dag.params and "conf" not in posted:  # the form of fields
            raw = params_form.raw_values(dag, posted)
            conf, field_errors = params_form.conf_from(dag, raw)
            if field_errors:
                raise ApiError(
                    400,
                    "bad conf",
                    problems=[f'"{k}" {v}' for k, v in field_errors.items()],
                    fields=field_errors,
                )
        else:
            conf = conf_from(conf_text.strip() or "{}")
        run = actions.trigger(rt, who, dag_id, conf)
    except ApiError as exc:
        if exc.status not in (400, 409):
            raise
        field_errors = dict(exc.extra.get("fields") or {})
        shown = field_errors if raw is not None else {}  # by their fields, not in the list
        problems = exc.extra.get("problems") or [exc.message]
        context = _dag_context(request, dag_id)
        context["fields"] = params_form.fields(dag, raw, field_errors or {})
        return render(
            request,
            "dag.html",
            who,
            status=400,
            conf_text=conf_text,
            raw_open=raw is None,
            error=[p for p in problems if not any(p.startswith(f'"{k}" ') for k in shown)],
            **context,
        )
    return back(f"/dags/{quote(dag_id)}/runs/{quote(run.run_id, safe='')}")
