"""The API's bodies for the operators' and admins' routes — backfills, access, purge —
beside web/models.py's, by the same rules (every model forbids fields it does not declare)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from beatflow.web.models import DagRun, Model, Reason, RequestBody, Timestamp

# ---------------------------------------------------------------------- requests


class BackfillBody(RequestBody):
    start: str = Field(max_length=40, description="first logical date (ISO date or date-time)")
    end: str = Field(max_length=40, description="last logical date (ISO date or date-time)")
    reprocess: Literal["none", "failed", "all"] = Field(
        default="none",
        description="none: only dates without a run; failed: failed runs run again too; "
        "all: successful runs run again too",
    )
    max_active_runs: int | None = Field(
        default=None, ge=1, le=1000, description="at most this many of its runs at once"
    )
    dry_run: bool = Field(default=False, description="answer the plan, create nothing")
    conf: dict[str, Any] | None = Field(default=None, description="checked against the params")
    reason: Reason = ""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "example": {"start": "2026-11-01", "end": "2026-11-30", "reprocess": "failed"}
        },
    )


class BackfillCancelBody(RequestBody):
    reason: Reason = ""


# ---------------------------------------------------------------------- backfills


class BackfillEntry(Model):
    run_id: str
    logical_date: Timestamp
    state: str | None = Field(description="the run's state when planned; none: no run yet")
    action: Literal["create", "rerun"]


class Backfill(Model):
    id: int
    dag_id: str
    state: Literal["running", "done", "cancelled"]
    start: Timestamp
    end: Timestamp
    reprocess: str
    max_active_runs: int
    actor: str
    reason: str
    created_at: Timestamp
    ended_at: Timestamp | None
    runs_total: int
    released: int = Field(description="runs created or re-run so far (the rest wait)")
    progress: dict[str, int] = Field(description="its runs by state; pending: not released yet")


class BackfillCreated(Model):
    dry_run: bool
    backfill: Backfill | None = Field(description="none for a dry run")
    plan: list[BackfillEntry]
    runs: list[DagRun] = Field(description="the runs released so far")


class BackfillPage(Model):
    backfills: list[Backfill]


# ---------------------------------------------------------------------- access

RoleName = Literal["viewer", "operator", "admin"]


class Me(Model):
    actor: str = Field(description="what the audit log records for this caller")
    name: str
    via: Literal["token", "session"]
    role: RoleName
    may: list[RoleName] = Field(description="the roles whose actions this caller may take")


class Grant(Model):
    name: str
    role: RoleName


class Access(Model):
    users: list[Grant]
    tokens: list[Grant]
    oidc: bool = Field(description="whether people may also log in through the OIDC provider")


class Purged(Model):
    dag_id: str | None
    deleted: int
