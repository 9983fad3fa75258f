"""/api/v1/pools: named slot limits shared by every worker (list, create or resize, delete);
changes need the operator role (as Airflow's Op role edits pools) and are audited."""

from __future__ import annotations

from typing import Any

from fastapi import Path, Request
from pydantic import Field

from beatflow.runs.pools import PoolError, check_pool, delete_pool, pool_json, set_pool
from beatflow.web import actions
from beatflow.web.api.base import ApiUser, router
from beatflow.web.deps import runtime
from beatflow.web.limits import ApiError
from beatflow.web.models import Model, Reason, RequestBody, Timestamp

PoolName = Path(min_length=1, max_length=250, pattern=r"^[A-Za-z0-9_.\-]+$")


class PoolBody(RequestBody):
    slots: int = Field(ge=0, le=1_000_000, description="how many task slots at most, all workers")
    description: str | None = Field(default=None, max_length=2000)
    reason: Reason = ""


class Pool(Model):
    name: str
    slots: int
    description: str | None
    used: int = Field(description="slots held by running task runs")
    queued: int = Field(description="slots wanted by task runs waiting for them")
    free: int = Field(description="slots - used (negative after a shrink below what runs)")
    updated_at: Timestamp


class PoolList(Model):
    pools: list[Pool]


class PoolDeleted(Model):
    name: str
    deleted: bool


@router.get("/pools", response_model=PoolList)
def list_pools(request: Request) -> dict[str, Any]:
    """Every pool with its slots used, queued and free."""
    with actions.api_errors():
        found = runtime(request).store.list_pools()
    return {"pools": [pool_json(p) for p in found]}


@router.put("/pools/{name}", response_model=Pool)
def put_pool(
    request: Request, who: ApiUser, body: PoolBody, name: str = PoolName
) -> dict[str, Any]:
    """Create pool ``name`` or resize it (takes effect at the next claim); audited."""
    with actions.api_errors():
        try:
            pool = set_pool(runtime(request), name, body.slots, body.description,
                            actor=who.actor, reason=body.reason[:500])  # fmt: skip
        except PoolError as exc:
            raise ApiError(400, str(exc)) from None
    return pool_json(pool)


@router.delete("/pools/{name}", response_model=PoolDeleted)
def remove_pool(request: Request, who: ApiUser, name: str = PoolName) -> dict[str, Any]:
    """Delete pool ``name`` (its tasks that have not started fail); 404 if there is none."""
    with actions.api_errors():
        try:
            check_pool(name)
        except PoolError as exc:
            raise ApiError(400, str(exc)) from None
        deleted = delete_pool(runtime(request), name, actor=who.actor)
    if not deleted:
        raise ApiError(404, f"no pool {name!r}")
    return {"name": name, "deleted": True}
