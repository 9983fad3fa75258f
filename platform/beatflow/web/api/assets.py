"""/api/v1/assets: every asset with its lineage (producers -> asset -> consumers) and newest
events, one asset, and an update of an asset from outside (audited, as the CLI's emit)."""

from __future__ import annotations

from typing import Any

from fastapi import Path as PathParam
from fastapi import Query, Request
from pydantic import Field

from beatflow.web import actions
from beatflow.web.api.base import ApiUser, router
from beatflow.web.api.runs import VERB
from beatflow.web.deps import runtime
from beatflow.web.limits import ApiError
from beatflow.web.models import Model, Reason, RequestBody, Timestamp

NAME = PathParam(max_length=250, description="the asset's name, e.g. warehouse.orders")


class AssetConsumer(Model):
    dag_id: str
    run_id: str


class AssetEvent(Model):
    id: int
    asset: str
    source: str = Field(description="task (a producing task run's success) or external")
    dag_id: str | None
    run_id: str | None
    task_id: str | None
    actor: str | None
    extra: dict[str, Any]
    created_at: Timestamp
    consumed_by: list[AssetConsumer] = []


class Asset(Model):
    name: str
    producers: list[str] = Field(description="dag_id.task_id of each task whose outlets name it")
    consumers: list[str] = Field(description="the DAGs scheduled on it")
    event_count: int
    events: list[AssetEvent]


class AssetList(Model):
    assets: list[Asset]


class EmitBody(RequestBody):
    extra: dict[str, Any] | None = Field(default=None, description="kept with the event")
    reason: Reason = ""


NO_EMIT_BODY = EmitBody()


@router.get("/assets", response_model=AssetList)
def list_assets(request: Request, events: int = Query(5, ge=0, le=100)) -> dict[str, Any]:
    """Every asset: its producers, consumers, event count and newest events."""
    from beatflow.runs.assets import assets_overview

    with actions.api_errors():
        return {"assets": assets_overview(runtime(request), events=events)}


@router.get("/assets/{name}", response_model=Asset)
def get_asset(
    request: Request, name: str = NAME, events: int = Query(20, ge=0, le=200)
) -> dict[str, Any]:
    """One asset with its newest events and the runs that consumed each."""
    from beatflow.runs.assets import asset_detail

    with actions.api_errors():
        data = asset_detail(runtime(request), name, events=events)
    if not data["producers"] and not data["consumers"] and not data["event_count"]:
        raise ApiError(404, f"no asset {name!r}: no DAG names it and it has no events")
    return data


@router.post("/assets/{name}/events", status_code=201, response_model=AssetEvent, responses=VERB)
def emit_event(
    request: Request, who: ApiUser, name: str = NAME, body: EmitBody = NO_EMIT_BODY
) -> dict[str, Any]:
    """Record an update of the asset from outside: the DAGs scheduled on it run as their
    conditions say (the beat leader's next pass)."""
    from beatflow.runs.assets import AssetNameError, emit_asset

    with actions.api_errors():
        try:
            event = emit_asset(
                runtime(request), name, extra=body.extra, actor=who.actor,
                reason=body.reason[:500],
            )  # fmt: skip
        except AssetNameError as exc:
            raise ApiError(400, str(exc)) from exc
    return {**event.to_json(), "consumed_by": []}
