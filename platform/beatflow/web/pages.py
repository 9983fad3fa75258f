"""Server-rendered pages (Jinja2) and their form actions: every form carries the session's CSRF
token and is refused without it. Assets are served from the package (no CDN), behind login."""

from __future__ import annotations

import functools
import hmac
import json
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from beatflow.web import actions, views
from beatflow.web.api import dag_page, flower_link
from beatflow.web.auth import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Principal,
    csrf_ok,
    same_origin,
)
from beatflow.web.deps import auth_of, conf_from, runtime
from beatflow.web.graph import render_svg
from beatflow.web.limits import ApiError, check_id

HERE = Path(__file__).parent
STATIC = HERE / "static"
STATIC_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
templates = Jinja2Templates(directory=str(HERE / "templates"))  # autoescapes .html

router = APIRouter(include_in_schema=False)


def page_user(request: Request) -> Principal:
    who = auth_of(request).authenticate(request)
    if who is None:
        raise ApiError(401, "log in first")
    return who


PageUser = Annotated[Principal, Depends(page_user)]


def login_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)


def _render(
    request: Request, name: str, who: Principal | None, status: int = 200, **ctx: Any
) -> HTMLResponse:
    ctx.update(
        request=request,
        csrf=who.csrf if who else "",
        user=who.actor if who else None,
        nonce=getattr(request.state, "csp_nonce", ""),
    )
    return templates.TemplateResponse(request, name, ctx, status_code=status)


def _check_csrf(request: Request, who: Principal, token: str) -> None:
    if not csrf_ok(who, request, token):
        raise ApiError(403, "CSRF check failed: reload the page and submit the form again")


def _back(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _safe_next(target: str) -> str:
    parts = urlsplit(target)
    if not target.startswith("/") or target.startswith("//") or parts.scheme or parts.netloc:
        return "/"
    return target


# ---------------------------------------------------------------------- login


@router.get("/login")
def login_form(request: Request, next: str = "/", error: str = "") -> Response:
    return _login_page(request, next)


def _login_page(request: Request, next: str, error: str = "", status: int = 200) -> Response:
    """The login form with a fresh form token, also set as a cookie scoped to /login."""
    token = auth_of(request).login_token()
    response = _render(
        request,
        "login.html",
        None,
        status=status,
        next=_safe_next(next),
        login_token=token,
        css=_app_css(),
        error=error,
    )
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=3600,
        httponly=True,
        samesite="strict",
        path="/login",
        secure=request.url.scheme == "https",
    )
    return response


@functools.cache
def _app_css() -> str:
    return (STATIC / "app.css").read_text()


@router.post("/login")
def login(
    request: Request,
    username: str = Form("", max_length=200),
    password: str = Form("", max_length=1000),
    csrf_token: str = Form("", max_length=200),
    next: str = Form("/", max_length=2000),
) -> Response:
    auth = auth_of(request)
    cookie = request.cookies.get(LOGIN_COOKIE, "")
    if (
        not cookie
        or not hmac.compare_digest(cookie.encode(), csrf_token.encode())
        or not same_origin(request)
    ):
        raise ApiError(403, "login form expired or posted from another site: reload /login")
    client = request.client.host if request.client else "-"
    if not auth.login_allowed(client):
        raise ApiError(429, "too many failed logins from this address: wait a minute")
    if not auth.check_password(username, password):
        auth.login_failed(client)
        return _login_page(request, next, "wrong user name or password", status=401)
    done = _back(_safe_next(next))
    done.set_cookie(
        SESSION_COOKIE,
        auth.new_session(username),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    done.delete_cookie(LOGIN_COOKIE, path="/login")
    return done


@router.post("/logout")
def logout(request: Request, who: PageUser, csrf_token: str = Form("")) -> Response:
    _check_csrf(request, who, csrf_token)
    response = _back("/login")
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/static/{name}")
def static(name: str, who: PageUser) -> Response:
    path = STATIC / name
    if "/" in name or name.startswith(".") or path.suffix not in STATIC_TYPES or not path.is_file():
        raise ApiError(404, "no such asset")
    return Response(path.read_bytes(), media_type=STATIC_TYPES[path.suffix])


# ---------------------------------------------------------------------- DAGs


@router.get("/")
def index(
    request: Request,
    who: PageUser,
    q: str = Query("", max_length=250),
    offset: int = Query(0, ge=0),
) -> Response:
    data = dag_page(request, q, offset, views.DAGS_PER_PAGE)
    return _render(
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
    return _render(
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
    _check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    actions.set_paused(runtime(request), who, dag_id, paused == "true")
    return _back(f"/dags/{quote(dag_id)}")


@router.post("/dags/{dag_id}/trigger")
def trigger_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    csrf_token: str = Form(""),
    conf: str = Form("{}", max_length=60_000),
) -> Response:
    _check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    try:
        run = actions.trigger(runtime(request), who, dag_id, conf_from(conf.strip() or "{}"))
    except ApiError as exc:
        if exc.status not in (400, 409):
            raise
        problems = exc.extra.get("problems") or [exc.message]
        return _render(
            request,
            "dag.html",
            who,
            status=400,
            conf_text=conf,
            error=problems,
            **_dag_context(request, dag_id),
        )
    return _back(f"/dags/{quote(dag_id)}/runs/{quote(run.run_id, safe='')}")


# ---------------------------------------------------------------------- runs


@router.get("/runs")
def runs_page(
    request: Request,
    who: PageUser,
    state: str | None = Query(None, max_length=20),
    cursor: int | None = Query(None, ge=1),
) -> Response:
    from beatflow.web.api import list_runs

    data = list_runs(request, None, state or None, None, cursor, 50)
    return _render(request, "runs.html", who, state=state or "", **data)


@router.get("/dags/{dag_id}/runs/{run_id}")
def run_page(request: Request, who: PageUser, dag_id: str, run_id: str) -> Response:
    check_id(dag_id, "DAG id")
    check_id(run_id, "run id")
    rt = runtime(request)
    with actions.api_errors():
        dag = rt.dag(dag_id)
        run = rt.store.get_dag_run(dag_id, run_id)
        if run is None:
            raise ApiError(404, f"no run {run_id!r} of DAG {dag_id!r}")
        tasks = rt.store.get_task_runs(dag_id, run_id)
    base = f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}"
    states = views.task_states(tasks)
    links = {t: f"{base}/tasks/{quote(t)}" for t in dag.tasks}
    rows = [
        {
            **views.task_run_detail(t),
            "label": t.task_id if t.map_index < 0 else f"{t.task_id}[{t.map_index}]",
            "href": f"{base}/tasks/{quote(t.task_id)}"
            + (f"?map_index={t.map_index}" if t.map_index >= 0 else ""),
        }
        for t in tasks
    ]
    seen = {t.task_id for t in tasks}
    waiting = [t for t in dag.topological_order() if t not in seen]
    return _render(
        request,
        "run.html",
        who,
        dag_id=dag_id,
        run=views.run_json(run),
        svg=render_svg(dag, states, links),
        rows=rows,
        waiting=waiting,
        base=base,
        status_url=f"/api/v1{base}/status",
        active=run.state in ("queued", "running"),
        has_failed=any(t.state in ("failed", "upstream_failed") for t in tasks),
    )


def _reason_ok(reason: str) -> str:
    return reason.strip()[:500]


@router.post("/dags/{dag_id}/runs/{run_id}/cancel")
def cancel_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    run_id: str,
    csrf_token: str = Form(""),
    reason: str = Form("", max_length=2000),
) -> Response:
    _check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    check_id(run_id, "run id")
    actions.cancel(runtime(request), who, dag_id, run_id, reason=_reason_ok(reason))
    return _back(f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}")


@router.post("/dags/{dag_id}/runs/{run_id}/clear")
def clear_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    run_id: str,
    csrf_token: str = Form(""),
    task_id: str = Form("", max_length=250),
    only_failed: str = Form(""),
    downstream: str = Form(""),
    reason: str = Form("", max_length=2000),
) -> Response:
    _check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    check_id(run_id, "run id")
    actions.clear(
        runtime(request),
        who,
        dag_id,
        run_id,
        tasks=[task_id] if task_id else [],
        only_failed=only_failed == "true",
        downstream=downstream == "true",
        reason=_reason_ok(reason),
    )
    return _back(f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}")


@router.post("/dags/{dag_id}/runs/{run_id}/mark")
def mark_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    run_id: str,
    csrf_token: str = Form(""),
    state: str = Form(""),
    task_id: str = Form("", max_length=250),
    reason: str = Form("", max_length=2000),
) -> Response:
    _check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    check_id(run_id, "run id")
    actions.mark(
        runtime(request),
        who,
        dag_id,
        run_id,
        state=state,
        task_id=task_id or None,
        reason=_reason_ok(reason),
    )
    return _back(f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}")


@router.get("/dags/{dag_id}/runs/{run_id}/tasks/{task_id}")
def task_page(
    request: Request,
    who: PageUser,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int = Query(-1, ge=-1),
) -> Response:
    from beatflow.web.api import get_logs, get_task_run, get_tries

    detail = get_task_run(request, dag_id, run_id, task_id, map_index)
    tries = get_tries(request, dag_id, run_id, task_id, map_index)
    logs = get_logs(request, dag_id, run_id, task_id, map_index, None)
    return _render(
        request,
        "task.html",
        who,
        dag_id=dag_id,
        run_id=run_id,
        t=detail,
        tries=tries["tries"],
        logs=logs,
        run_href=f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}",
        flower=flower_link(request, detail.get("celery_task_id")),
        can_clear=detail["state"] in ("failed", "upstream_failed", "cancelled", "success"),
        extras_json=json.dumps,
    )


# ---------------------------------------------------------------------- dead letters


@router.get("/dead-letters")
def dead_letters_page(
    request: Request,
    who: PageUser,
    cursor: int | None = Query(None, ge=1),
    include_replayed: bool = False,
) -> Response:
    from beatflow.web.api import list_dead_letters

    data = list_dead_letters(request, None, include_replayed, cursor, 50)
    return _render(request, "dead_letters.html", who, include_replayed=include_replayed, **data)


@router.post("/dead-letters/{letter_id}/replay")
def replay_form(
    request: Request,
    who: PageUser,
    letter_id: int,
    csrf_token: str = Form(""),
) -> Response:
    _check_csrf(request, who, csrf_token)
    run = actions.replay(runtime(request), who, letter_id)
    return _back(f"/dags/{quote(run.dag_id)}/runs/{quote(run.run_id, safe='')}")
