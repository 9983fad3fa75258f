"""Runs, a run's page and its verbs (cancel, clear, mark), a task run's page, dead letters and
their replay."""

from __future__ import annotations

import json
from urllib.parse import quote

from fastapi import Form, Query, Request
from fastapi.responses import Response

from beatflow.web import actions, views
from beatflow.web.api.base import flower_link
from beatflow.web.api.letters import list_dead_letters
from beatflow.web.api.runs import list_runs
from beatflow.web.api.tasks import get_logs, get_task_run, get_tries
from beatflow.web.deps import runtime
from beatflow.web.graph import render_svg
from beatflow.web.limits import ApiError, check_id
from beatflow.web.pages.base import PageUser, back, check_csrf, reason_ok, render, router


@router.get("/runs")
def runs_page(
    request: Request,
    who: PageUser,
    state: str | None = Query(None, max_length=20),
    cursor: int | None = Query(None, ge=1),
) -> Response:
    data = list_runs(request, None, state or None, None, cursor, 50)
    return render(request, "runs.html", who, state=state or "", **data)


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
    return render(
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


@router.post("/dags/{dag_id}/runs/{run_id}/cancel")
def cancel_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    run_id: str,
    csrf_token: str = Form(""),
    reason: str = Form("", max_length=2000),
) -> Response:
    check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    check_id(run_id, "run id")
    actions.cancel(runtime(request), who, dag_id, run_id, reason=reason_ok(reason))
    return back(f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}")


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
    check_csrf(request, who, csrf_token)
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
        reason=reason_ok(reason),
    )
    return back(f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}")


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
    check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    check_id(run_id, "run id")
    actions.mark(
        runtime(request),
        who,
        dag_id,
        run_id,
        state=state,
        task_id=task_id or None,
        reason=reason_ok(reason),
    )
    return back(f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}")


@router.get("/dags/{dag_id}/runs/{run_id}/tasks/{task_id}")
def task_page(
    request: Request,
    who: PageUser,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int = Query(-1, ge=-1),
) -> Response:
    detail = get_task_run(request, dag_id, run_id, task_id, map_index)
    tries = get_tries(request, dag_id, run_id, task_id, map_index)
    logs = get_logs(request, dag_id, run_id, task_id, map_index, None)
    return render(
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
    data = list_dead_letters(request, None, include_replayed, cursor, 50)
    return render(request, "dead_letters.html", who, include_replayed=include_replayed, **data)


@router.post("/dead-letters/{letter_id}/replay")
def replay_form(
    request: Request,
    who: PageUser,
    letter_id: int,
    csrf_token: str = Form(""),
) -> Response:
    check_csrf(request, who, csrf_token)
    run = actions.replay(runtime(request), who, letter_id)
    return back(f"/dags/{quote(run.dag_id)}/runs/{quote(run.run_id, safe='')}")
