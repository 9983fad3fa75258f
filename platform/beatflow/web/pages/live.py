"""What the live pages show and poll: a run's task rows and a task run's panel, each drawn by
one template that the page includes and its poll answers, so a row updated live keeps every
column (link, worker, try, dates) and a map's instances appear as they are created."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import Query, Request
from fastapi.responses import JSONResponse

from beatflow.dag.model import DAG
from beatflow.settings.accounts import Role
from beatflow.states import TASK_RUN_FINAL
from beatflow.store import DagRunRecord, TaskRunRecord
from beatflow.times import utc_now
from beatflow.web import actions, gantt, graph, views
from beatflow.web.api.base import flower_link
from beatflow.web.api.tasks import get_logs, get_task_run, get_tries
from beatflow.web.deps import runtime
from beatflow.web.limits import ApiError, check_id
from beatflow.web.pages.base import PageUser, display_json, router, templates

RUN_ACTIVE = ("queued", "running")
_FINAL = {str(s) for s in TASK_RUN_FINAL}


def label(t: TaskRunRecord) -> str:
    return t.task_id if t.map_index < 0 else f"{t.task_id}[{t.map_index}]"


def shown_state(t: TaskRunRecord, tasks: list[TaskRunRecord]) -> str:
    """A task run's state as the run page shows it. A ``.map()`` task's own run ends when it has
    sent its instances: its row shows ``running`` while any instance (sent or still to come)
    is not final, then the worst state among them."""
    if t.map_index >= 0 or t.map_count is None or t.state != "success":
        return t.state
    instances = [i.state for i in tasks if i.task_id == t.task_id and i.map_index >= 0]
    if len(instances) < t.map_count or any(s not in _FINAL for s in instances):
        return "running"
    return views.worst(instances) if instances else t.state


def run_rows(
    dag: DAG, dag_id: str, run_id: str, tasks: list[TaskRunRecord]
) -> tuple[list[dict[str, Any]], list[str], dict[str, str]]:
    """The run page's task rows in a stable order (topological, then id, then map index), the
    tasks not started yet, and each task's state for the graph (a map: its worst row)."""
    base = f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}"
    order = {t: i for i, t in enumerate(dag.topological_order())}
    tasks = sorted(tasks, key=lambda t: (order.get(t.task_id, len(order)), t.task_id, t.map_index))
    rows = [
        {
            **views.task_run_detail(t),
            "state": shown_state(t, tasks),
            "label": label(t),
            "href": f"{base}/tasks/{quote(t.task_id)}"
            + (f"?map_index={t.map_index}" if t.map_index >= 0 else ""),
        }
        for t in tasks
    ]
    by_task: dict[str, list[str]] = {}
    for row in rows:
        by_task.setdefault(row["task_id"], []).append(row["state"])
    states = {tid: views.worst(s) for tid, s in by_task.items()}
    seen = {t.task_id for t in tasks}
    waiting = [t for t in dag.topological_order() if t not in seen]
    return rows, waiting, states


def secs_text(value: float | None) -> str:
    """A duration as the pages write it (the ``secs`` macro)."""
    return "–" if value is None else f"{value:.2f} s"


def fragment(name: str, **ctx: Any) -> str:
    """A template's HTML (autoescaped as the pages are), for a poll to put in the page."""
    return templates.get_template(name).render(**ctx)


def read_run(
    request: Request, dag_id: str, run_id: str
) -> tuple[DAG, DagRunRecord, list[TaskRunRecord]]:
    """The DAG, the run and its task runs a run page (or its poll) draws; 404 for no such run."""
    check_id(dag_id, "DAG id")
    check_id(run_id, "run id")
    rt = runtime(request)
    with actions.api_errors():
        dag = rt.dag(dag_id)
        run = rt.store.get_dag_run(dag_id, run_id)
        if run is None:
            raise ApiError(404, f"no run {run_id!r} of DAG {dag_id!r}")
        return dag, run, rt.store.get_task_runs(dag_id, run_id)


@router.get("/dags/{dag_id}/runs/{run_id}/live")
def run_live(request: Request, who: PageUser, dag_id: str, run_id: str) -> JSONResponse:
    """The run page's poll: the run's state and the task rows, drawn by the page's template."""
    dag, run, tasks = read_run(request, dag_id, run_id)
    rows, waiting, states = run_rows(dag, dag_id, run_id, tasks)
    body = views.run_json(run)
    return JSONResponse(
        {
            "state": run.state,
            "final": run.state not in RUN_ACTIVE,
            "duration": secs_text(body.get("duration_seconds")),
            "tasks": states,
            "groups": graph.group_states(dag, states),
            "rows": fragment("_task_rows.html", rows=rows, waiting=waiting),
            "gantt": fragment("_gantt.html", gantt=gantt.bars(rows, utc_now())),
        }
    )


def task_context(
    request: Request, who: Any, dag_id: str, run_id: str, task_id: str, map_index: int
) -> dict[str, Any]:
    """What the task page's live panel shows: the task run, its tries and its log tail."""
    detail = get_task_run(request, dag_id, run_id, task_id, map_index)
    tries = get_tries(request, dag_id, run_id, task_id, map_index)
    logs = get_logs(request, dag_id, run_id, task_id, map_index, None)
    if not detail["result"]["truncated"]:  # the preview as written, not as escaped JSON
        detail["result"]["preview"] = display_json(json.loads(detail["result"]["preview"]))
    run_href = f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}"
    task_href = f"{run_href}/tasks/{quote(task_id)}" + (
        f"?map_index={map_index}" if map_index >= 0 else ""
    )
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "t": detail,
        "tries": tries["tries"],
        "logs": logs,
        "run_href": run_href,
        "live_url": f"{run_href}/tasks/{quote(task_id)}/live"
        + (f"?map_index={map_index}" if map_index >= 0 else ""),
        "task_href": task_href,
        "flower": flower_link(request, detail.get("celery_task_id")),
        "can_clear": who.can(Role.OPERATOR)
        and detail["state"] in ("failed", "upstream_failed", "cancelled", "success"),
        "final": detail["state"] in _FINAL,
        "csrf": who.csrf,
    }


@router.get("/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/live")
def task_live(
    request: Request,
    who: PageUser,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int = Query(-1, ge=-1, lt=2**31),
) -> JSONResponse:
    """The task page's poll: its state, tries and log tail, drawn by the page's template."""
    ctx = task_context(request, who, dag_id, run_id, task_id, map_index)
    return JSONResponse(
        {
            "state": ctx["t"]["state"],
            "final": ctx["final"],
            "html": fragment("_task_live.html", **ctx),
        }
    )
