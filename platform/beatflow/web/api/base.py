"""What every API route shares: the router (authenticated, bodies read by the bounded parser,
the error answers it documents), and the lookups of a DAG, a run and a task run by path."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.routing import APIRoute

from beatflow.store import DagRunRecord, TaskRunRecord
from beatflow.web import actions
from beatflow.web.auth import Principal
from beatflow.web.deps import admin_user, api_user, parse_body, runtime
from beatflow.web.limits import ApiError, check_id
from beatflow.web.models import ErrorBody

LOG_LINES = 5000
BODY_ERROR = "beatflow_body_error"


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


ERRORS: dict[int | str, dict[str, Any]] = {
    400: _error("bad input: an id, a query parameter or the body (the limit is named)"),
    401: _error("no credentials, or wrong ones"),
    403: _error(
        "the caller's role does not allow it (a viewer's change, an operator's admin action: "
        "role and needed say which), or a session's change without its X-CSRF-Token header "
        "or from another site"
    ),
    404: _error("no such DAG, run, task run or dead letter"),
    503: _error("the results database or the broker is unavailable"),
}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: _error("the verb does not apply to the run's current state")
}
TOO_LARGE: dict[int | str, dict[str, Any]] = {413: _error("the body is over the size limit")}


class JsonRoute(APIRoute):
    """A route whose JSON body is parsed by the bounded parser whatever its content type says
    (FastAPI's own parse would recurse without bound on deep input); a body that cannot be read
    is answered by ``body_checked`` once the caller is authenticated."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def bounded(request: Request) -> Response:
            raw = await request.body()
            if not raw.strip():
                request.__dict__["_body"] = b""  # whitespace is no body, as an empty one
            else:
                try:
                    data: Any = parse_body(raw)
                except ApiError as exc:
                    request.scope[BODY_ERROR] = exc
                    data = {}
                request.__dict__["_json"] = data  # what Request.json() answers from now on
                headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]
                request.scope["headers"] = [*headers, (b"content-type", b"application/json")]
                request.__dict__.pop("_headers", None)
            return await handler(request)

        return bounded


def body_checked(request: Request) -> None:
    """The body's parse problem, after authentication (a stranger learns nothing from it)."""
    error = request.scope.get(BODY_ERROR)
    if isinstance(error, ApiError):
        raise error


router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(api_user), Depends(body_checked)],
    route_class=JsonRoute,
    responses=ERRORS,
)

ApiUser = Annotated[Principal, Depends(api_user)]
AdminUser = Annotated[Principal, Depends(admin_user)]


def dag_of(request: Request, dag_id: str) -> Any:
    check_id(dag_id, "DAG id")
    with actions.api_errors():
        return runtime(request).dag(dag_id)


def run_of(request: Request, dag_id: str, run_id: str) -> DagRunRecord:
    dag_of(request, dag_id)
    check_id(run_id, "run id")
    with actions.api_errors():
        run = runtime(request).store.get_dag_run(dag_id, run_id)
    if run is None:
        raise ApiError(404, f"no run {run_id!r} of DAG {dag_id!r}")
    return run


def task_of(
    request: Request, dag_id: str, run_id: str, task_id: str, map_index: int
) -> TaskRunRecord:
    run_of(request, dag_id, run_id)
    check_id(task_id, "task id")
    with actions.api_errors():
        found = runtime(request).store.find_task_run(dag_id, run_id, task_id, map_index)
    if found is None:
        where = task_id if map_index < 0 else f"{task_id}[{map_index}]"
        raise ApiError(404, f"no task run {where} in run {run_id!r} of DAG {dag_id!r}")
    return found


def flower_link(request: Request, celery_task_id: str | None) -> str | None:
    if not celery_task_id:
        return None
    settings = runtime(request).settings
    base = settings.web_flower_url
    if not base:
        host = request.url.hostname or "127.0.0.1"
        base = f"{request.url.scheme}://{host}:{settings.flower_port}"
    return f"{base}/task/{celery_task_id}"
