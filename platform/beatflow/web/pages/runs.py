"""Runs, a run's page and its verbs (cancel, clear, mark), a task run's page, dead letters and
their replay."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Form, Query, Request
from fastapi.responses import Response

from beatflow.states import DagRunState
from beatflow.store import TaskRunRecord
from beatflow.store.records import TRIGGERS, AuditRecord
from beatflow.times import utc_now
from beatflow.web import actions, gantt, graph, views
from beatflow.web.api.letters import list_dead_letters
from beatflow.web.api.runs import list_runs
from beatflow.web.deps import runtime
from beatflow.web.limits import ApiError, check_id
from beatflow.web.pages.base import (
    PageUser,
    back,
    check_csrf,
    display_json,
    reason_given,
    render,
    router,
)
from beatflow.web.pages.live import label, read_run, run_rows, task_context

AUDIT_ROWS = 20
SUCCEEDED = ("success", "skipped")  # a task in any other state has not succeeded


@router.get("/runs")
def runs_page(
    request: Request,
    who: PageUser,
    dag_id: str | None = Query(None, max_length=250),
    state: str | None = Query(None, max_length=20),
    trigger: str | None = Query(None, max_length=20),
    cursor: int | None = Query(None, ge=1),
    search: str | None = Query(None, max_length=250),
    since: str | None = Query(None, max_length=40),
    until: str | None = Query(None, max_length=40),
) -> Response:
    if dag_id:
        check_id(dag_id, "DAG id")
    data = list_runs(
        request, dag_id or None, state or None, trigger or None, cursor, 50, search, since, until
    )
    filters = {"dag_id": dag_id, "state": state, "trigger": trigger}
    filters |= {"search": search, "since": since, "until": until}
    return render(
        request,
        "runs.html",
        who,
        dag_id=dag_id or "",
        state=state or "",
        trigger=trigger or "",
        search=search or "",
        since=since or "",
        until=until or "",
        query=urlencode({k: v for k, v in filters.items() if v}),
        states=[s.value for s in DagRunState],
        triggers=sorted(TRIGGERS),
        dag_ids=sorted(runtime(request).dagbag.dags),
        **data,
    )


@router.get("/dags/{dag_id}/runs/{run_id}")
def run_page(
    request: Request,
    who: PageUser,
    dag_id: str,
    run_id: str,
    collapsed: str = Query("", max_length=4000),
) -> Response:
    dag, run, tasks = read_run(request, dag_id, run_id)
    rt = runtime(request)
    with actions.api_errors():
        audit = rt.store.list_audit(dag_id, run_id, limit=AUDIT_ROWS)
    base = f"/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}"
    rows, waiting, states = run_rows(dag, dag_id, run_id, tasks)
    links = {t: f"{base}/tasks/{quote(t)}" for t in dag.tasks}
    shut = graph.parse_collapsed(dag, collapsed)
    toggle = graph.toggler(base, "run-graph", shut)
    marked = _marked_note(audit)
    overruled = _overruled(dag.tasks, states, marked, run.state)
    flag = f"run marked success by {marked['actor']}" if marked and overruled else ""
    return render(
        request,
        "run.html",
        who,
        dag_id=dag_id,
        run=views.run_json(run),
        conf_text=display_json(run.conf),
        svg=graph.render_svgs(
            dag, states, links, collapsed=shut, toggle=toggle, marked=dict.fromkeys(overruled, flag)
        ),
        groups=graph.group_controls(dag, shut, base, "run-graph"),
        rows=[r | {"overruled": flag if _is_overruled(r, overruled) else ""} for r in rows],
        waiting=waiting,
        waiting_flag=flag,
        gantt=gantt.bars(rows, utc_now()),
        base=base,
        live_url=f"{base}/live",
        active=run.state in ("queued", "running"),
        has_failed=any(t.state in ("failed", "upstream_failed") for t in tasks),
        audit=[audit_json(a) for a in audit],
        marked=marked,
        overruled=_count_states(overruled, len(dag.tasks)),
        still_running=_still_running(audit, tasks),
    )


def audit_json(a: AuditRecord) -> dict[str, Any]:
    return {
        "at": a.at.isoformat(),
        "actor": a.actor,
        "action": a.action,
        "reason": str(a.detail.get("reason") or ""),
        "detail": {k: v for k, v in a.detail.items() if k != "reason"},
    }


def _marked_note(audit: list[AuditRecord]) -> dict[str, str] | None:
    """The latest mark of the whole run: who set its state by hand, and why."""
    for a in audit:  # newest first
        if a.action == "mark" and not a.detail.get("task_id"):
            return {
                "state": str(a.detail.get("state", "")),
                "actor": a.actor,
                "reason": str(a.detail.get("reason") or ""),
                "at": a.at.isoformat(),
            }
    return None


def _overruled(
    tasks: Iterable[str],
    states: Mapping[str, str],
    marked: dict[str, str] | None,
    run_state: str,
) -> dict[str, str]:
    """Task id -> its state, for the tasks that had not succeeded (or not run: ``none``) in a
    run an operator marked success and that is still so: the run's state overrules theirs, which
    are kept as they ended."""
    if marked is None or marked["state"] != "success" or run_state != "success":
        return {}
    shown = {t: states.get(t, "none") for t in tasks}
    return {t: s for t, s in shown.items() if s not in SUCCEEDED}


def _is_overruled(row: Mapping[str, Any], overruled: Mapping[str, str]) -> bool:
    """A task run's row that had not succeeded (a map instance: itself) in an overruled task."""
    return row["task_id"] in overruled and row["state"] not in SUCCEEDED


def _count_states(overruled: Mapping[str, str], total: int) -> dict[str, Any] | None:
    """What the marked note says of them: how many of the DAG's tasks, and in which states."""
    if not overruled:
        return None
    counts = Counter(overruled.values())
    states = ", ".join(f"{n} {'not run' if s == 'none' else s}" for s, n in sorted(counts.items()))
    return {"count": len(overruled), "total": total, "states": states}


def _still_running(audit: list[AuditRecord], tasks: list[TaskRunRecord]) -> list[dict[str, Any]]:
    """Task runs a cancel without terminate left running on their workers: they had started
    when the run was cancelled, so their code goes on until it returns (its outcome is not
    recorded)."""
    cancel = next((a for a in audit if a.action == "cancel"), None)
    if cancel is None or cancel.detail.get("terminate"):
        return []
    keys = set(cancel.detail.get("task_runs_cancelled") or ())
    return [
        {
            "label": label(t),
            "worker": t.worker,
        }
        for t in tasks
        if t.dedupe_key in keys and t.started_at is not None and t.state == "cancelled"
    ]


@router.post("/dags/{dag_id}/runs/{run_id}/cancel")
def cancel_form(
    request: Request,
    who: PageUser,
    dag_id: str,
    run_id: str,
    csrf_token: str = Form(""),
    reason: str = Form("", max_length=2000),
    terminate: str = Form(""),
) -> Response:
    check_csrf(request, who, csrf_token)
    check_id(dag_id, "DAG id")
    check_id(run_id, "run id")
    actions.cancel(
        runtime(request),
        who,
        dag_id,
        run_id,
        reason=reason_given(reason),
        terminate=terminate == "true",
    )
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
        reason=reason_given(reason),
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
        reason=reason_given(reason),
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
    ctx = task_context(request, who, dag_id, run_id, task_id, map_index)
    return render(request, "task.html", who, **ctx)


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
    reason: str = Form("", max_length=2000),
) -> Response:
    check_csrf(request, who, csrf_token)
    try:
        run = actions.replay(runtime(request), who, letter_id, reason=reason_given(reason))
    except ApiError as exc:
        if exc.status != 409:
            raise
        # refused (a stale letter, one replayed from another tab): the list as it is now,
        # with the reason, so the operator sees why nothing ran
        data = list_dead_letters(request, None, True, None, 50)
        refused = f"Replay of dead letter {letter_id} refused: {exc.message}"
        return render(
            request, "dead_letters.html", who, status=409, include_replayed=True,
            error=[refused], **data,
        )  # fmt: skip
    return back(f"/dags/{quote(run.dag_id)}/runs/{quote(run.run_id, safe='')}")
