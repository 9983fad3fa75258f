"""/api/v1: health, DAGs (list, detail with the graph, grid), pause and unpause."""

from __future__ import annotations

from typing import Any

from fastapi import Query, Request

from beatflow.web import actions, models, views
from beatflow.web.api.base import CONFLICT, ApiUser, dag_of, router
from beatflow.web.deps import runtime
from beatflow.web.limits import check_limit


@router.get("/health", response_model=models.Health)
def health(request: Request) -> dict[str, Any]:
    """The database answers and the dags folder loaded (broken modules are counted)."""
    rt = runtime(request)
    with actions.api_errors():
        revision = rt.store.current_revision()
    bag = rt.dagbag
    return {"status": "ok", "schema": revision, "dags": len(bag.dags), "broken": len(bag.errors)}


def dag_page(request: Request, q: str, offset: int, limit: int) -> dict[str, Any]:
    rt = runtime(request)
    bag = rt.dagbag
    ids = sorted(d for d in bag.dags if q.lower() in d.lower())
    page = ids[offset : offset + limit]
    with actions.api_errors():
        paused = rt.store.paused_dag_ids()
        last = rt.store.latest_dag_runs(page, views.LAST_RUNS)
    return {
        "dags": [views.dag_summary(bag.dags[d], d in paused, last[d]) for d in page],
        "total": len(ids),
        "next_offset": offset + limit if offset + limit < len(ids) else None,
        "errors": [views.load_error_json(e) for e in bag.errors],
    }


@router.get("/dags", response_model=models.DagPage)
def list_dags(
    request: Request,
    q: str = Query("", max_length=250, description="substring of the DAG id"),
    offset: int = Query(0, ge=0),
    limit: int = Query(views.DAGS_PER_PAGE, ge=1, le=200),
) -> dict[str, Any]:
    """DAGs (schedule, next run, paused, last runs) and broken modules with their errors."""
    return dag_page(request, q, offset, check_limit(limit))


@router.get("/dags/{dag_id}", response_model=models.DagDetail)
def get_dag(request: Request, dag_id: str) -> dict[str, Any]:
    """One DAG: tasks, edges (the graph), params, schedule, last runs."""
    dag = dag_of(request, dag_id)
    rt = runtime(request)
    with actions.api_errors():
        paused = rt.store.is_paused(dag_id)
        last = rt.store.latest_dag_runs([dag_id], views.LAST_RUNS)[dag_id]
    return views.dag_detail(dag, paused, last)


@router.get("/dags/{dag_id}/grid", response_model=models.Grid)
def get_grid(
    request: Request, dag_id: str, runs: int = Query(views.GRID_RUNS, ge=1, le=200)
) -> dict[str, Any]:
    """Recent runs x tasks, coloured by state."""
    dag = dag_of(request, dag_id)
    store = runtime(request).store
    with actions.api_errors():
        recent, _ = store.page_dag_runs(dag_id, limit=check_limit(runs))
        tasks = store.task_runs_of(dag_id, [r.run_id for r in recent])
    return views.grid(dag, recent, tasks)


@router.post("/dags/{dag_id}/pause", response_model=models.Paused, responses=CONFLICT)
def pause(request: Request, who: ApiUser, dag_id: str) -> dict[str, Any]:
    """Stop scheduling the DAG (runs already started go on)."""
    dag_of(request, dag_id)
    actions.set_paused(runtime(request), who, dag_id, True)
    return {"dag_id": dag_id, "paused": True}


@router.post("/dags/{dag_id}/unpause", response_model=models.Paused, responses=CONFLICT)
def unpause(request: Request, who: ApiUser, dag_id: str) -> dict[str, Any]:
    """Schedule the DAG again."""
    dag_of(request, dag_id)
    actions.set_paused(runtime(request), who, dag_id, False)
    return {"dag_id": dag_id, "paused": False}
