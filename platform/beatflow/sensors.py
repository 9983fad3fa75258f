"""Built-in sensors: ``FileSensor``, ``SqlSensor``, ``HttpSensor`` and ``ExternalRun``. Each
takes the options of ``@task.sensor`` (``poke_interval``, ``timeout``, ``mode``, ``soft_fail``,
``exponential_backoff``, ``max_wait``) and of ``@task`` (``task_id``, ``retries``, ``queue``...);
made inside a ``with DAG(...)`` block it is a task of that DAG (use it with ``>>``)::

    with DAG("reports", schedule="@daily", start_date=datetime(2026, 1, 1)):
        FileSensor(path="/data/in/{ds}/*.csv", poke_interval=60) >> load()

Paths, SQL and URLs may name the run's fields as ``{dag_id}``, ``{run_id}``, ``{ds}`` (the
logical date, YYYY-MM-DD), ``{logical_date}`` (ISO 8601) and ``{params[name]}`` (a param)."""

from __future__ import annotations

import glob
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Collection
from typing import Any

from beatflow.dag.sensors import PokeResult, builtin
from beatflow.states import TaskRunState

__all__ = ["ExternalRun", "FileSensor", "HttpSensor", "PokeResult", "SqlSensor"]


def _fields(ctx: Any) -> dict[str, Any]:
    when = ctx.logical_date
    return {
        "params": dict(ctx.params),
        "dag_id": ctx.dag_id,
        "run_id": ctx.run_id,
        "ds": when.date().isoformat() if when is not None else "",
        "logical_date": when.isoformat() if when is not None else "",
    }


def _render(text: str, ctx: Any) -> str:
    return text.format(**_fields(ctx)) if "{" in text else text


def FileSensor(path: str | os.PathLike[str], **options: Any) -> Any:
    """Done when ``path`` (a glob pattern; ``**`` matches folders) matches at least one file or
    folder; the result is the sorted list of matches."""
    pattern = os.fspath(path)

    def wait_for_file(ctx: Any) -> PokeResult:
        found = sorted(glob.glob(_render(pattern, ctx), recursive=True))
        return PokeResult(bool(found), found)

    return builtin(wait_for_file, options)


def SqlSensor(
    conn_url: str, sql: str, *, parameters: dict[str, Any] | None = None, **options: Any
) -> Any:
    """Done when ``sql`` (run through SQLAlchemy on ``conn_url``) returns a first row whose
    first cell is truthy; the result is that cell. ``parameters`` are bound (``:name``)."""

    def wait_for_sql(ctx: Any) -> PokeResult:
        import sqlalchemy as sa

        engine = sa.create_engine(conn_url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                row = conn.execute(sa.text(_render(sql, ctx)), parameters or {}).first()
        finally:
            engine.dispose()
        cell = None if row is None or len(row) == 0 else row[0]
        return PokeResult(bool(cell), cell if isinstance(cell, str | int | float | bool) else None)

    return builtin(wait_for_sql, options)


def HttpSensor(
    url: str,
    *,
    response_check: Callable[[int, bytes], Any] | None = None,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    request_timeout: float = 10.0,
    **options: Any,
) -> Any:
    """Done when ``url`` answers 2xx (and ``response_check(status, body)``, when given, is
    truthy); the result is the body as JSON when it parses, else as text (standard library
    only: no HTTP client is added to beatflow). An answer of 404 or 5xx, or no answer, is
    "not yet"; another 4xx fails the poke (a retry, when the task has retries)."""

    def wait_for_http(ctx: Any) -> PokeResult:
        request = urllib.request.Request(_render(url, ctx), method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=request_timeout) as answer:
                status, body = answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404 or exc.code >= 500:
                return PokeResult(False)
            raise
        except (urllib.error.URLError, TimeoutError, ConnectionError):
            return PokeResult(False)
        if response_check is not None and not response_check(status, body):
            return PokeResult(False)
        text = body.decode("utf-8", "replace")
        try:
            return PokeResult(True, json.loads(text))
        except ValueError:
            return PokeResult(True, text)

    return builtin(wait_for_http, options)


def ExternalRun(
    dag_id: str,
    task_id: str | None = None,
    *,
    allowed_states: Collection[str] = (TaskRunState.SUCCESS,),
    failed_states: Collection[str] = (),
    **options: Any,
) -> Any:
    """Done when the run of DAG ``dag_id`` for this run's logical date (or its task
    ``task_id``) is in one of ``allowed_states``; one in ``failed_states`` fails the sensor at
    once. The result is the state seen."""
    allowed, failed = {str(s) for s in allowed_states}, {str(s) for s in failed_states}
    what = dag_id if task_id is None else f"{dag_id}.{task_id}"

    def wait_for_run(ctx: Any) -> PokeResult:
        from celery import current_task

        from beatflow.runtime import runtime_of

        if ctx.logical_date is None:
            raise ValueError(f"ExternalRun({what}): this run has no logical date to match")
        store = runtime_of(current_task.app).store
        states = [r.state for r in store.dag_runs_at(dag_id, ctx.logical_date)]
        if task_id is not None:
            runs = store.dag_runs_at(dag_id, ctx.logical_date)
            states = [
                t.state
                for r in runs
                for t in store.get_task_runs(dag_id, r.run_id, [task_id])
                if t.map_index < 0
            ]
        if any(s in failed for s in states):
            bad = next(s for s in states if s in failed)
            raise RuntimeError(f"ExternalRun: {what} for {ctx.logical_date.isoformat()} is {bad}")
        done = next((s for s in states if s in allowed), None)
        return PokeResult(done is not None, done)

    wait_for_run.__name__ = f"wait_for_{dag_id}" if task_id is None else f"wait_for_{task_id}"
    return builtin(wait_for_run, options)
