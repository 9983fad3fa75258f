"""The API's request and response bodies as pydantic models: FastAPI validates requests and
responses with them and builds the OpenAPI document from them. Every model forbids fields it
does not declare (a typo in a body is a 400, never silently ignored)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# an ISO 8601 timestamp as the records carry it (datetime.isoformat(), offset included)
Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
Reason = Annotated[str, Field(description="why (kept in the audit log; cut at 500 characters)")]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RequestBody(Model):
    """Strict: no coercion ("true" is not a boolean, 5 is not a run id)."""

    model_config = ConfigDict(extra="forbid", strict=True)


# ---------------------------------------------------------------------- requests


class TriggerBody(RequestBody):
    conf: dict[str, Any] | str | None = Field(
        default=None,
        description="checked against the DAG's params; a string holding a JSON object too",
    )
    run_id: str | None = Field(default=None, description="default: manual__<time>")
    reason: Reason = ""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"example": {"conf": {"limit": 10}, "reason": "nightly CI"}},
    )


class CancelBody(RequestBody):
    reason: Reason = ""
    terminate: bool = Field(default=False, description="also stop the task runs that are running")


class ClearBody(RequestBody):
    tasks: list[str] = Field(
        default_factory=list, max_length=1000, description="task ids; none: every task"
    )
    downstream: bool = False
    only_failed: bool = False
    reason: Reason = ""


class MarkBody(RequestBody):
    state: Literal["success", "failed"]
    task_id: str | None = Field(default=None, description="one task of the run; none: the run")
    reason: Reason = ""


class PurgeBody(RequestBody):
    dag_id: str | None = Field(default=None, description="one DAG's dead letters; none: all")
    reason: Reason = ""


# a task run's ``error``: what went wrong, or for a skipped task run why it was skipped
SKIP_REASON = (
    "why it failed; for a skipped task run, why it was skipped (the reason given to Skip, the "
    "branch or short-circuit that skipped it, or the trigger rule)"
)

# ---------------------------------------------------------------------- errors


class ErrorBody(Model):
    """What every 4xx and 5xx answer carries."""

    error: str = Field(description="what went wrong and what to do")
    status: int
    problems: list[str] | None = Field(default=None, description="every problem of a bad conf")
    role: Literal["viewer", "operator", "admin"] | None = Field(
        default=None, description="a 403 for a role: the caller's role"
    )
    needed: Literal["viewer", "operator", "admin"] | None = Field(
        default=None, description="a 403 for a role: the role the action needs"
    )
    reason: str | None = Field(
        default=None, description="why a dead letter is stale (a refused replay): who closed it"
    )
    fields: dict[str, str] | None = Field(
        default=None, description="a bad conf: each refused param and why (its value's problem)"
    )


# ---------------------------------------------------------------------- DAGs


class Health(Model):
    status: Literal["ok"]
    schema_: str | None = Field(alias="schema", description="the database's migration revision")
    dags: int
    broken: int

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


class LastRun(Model):
    run_id: str
    state: str
    queued_at: Timestamp | None


class LoadError(Model):
    file: str
    line: int | None
    dag_id: str | None
    error: str


class DagBase(Model):
    dag_id: str
    description: str | None
    schedule: str | None
    schedule_words: str
    timezone: str
    next_run: Timestamp | None
    paused: bool
    tags: list[str]
    file: str | None
    line: int | None
    last_runs: list[LastRun]


class DagSummary(DagBase):
    tasks: int = Field(description="how many")


class DagPage(Model):
    dags: list[DagSummary]
    total: int
    next_offset: int | None
    errors: list[LoadError]


class Param(Model):
    name: str
    type: str
    required: bool
    default: Any
    description: str | None
    title: str | None = None
    schema_: dict[str, Any] = Field(
        default_factory=dict, alias="schema", description="the param as a JSON Schema"
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


class TaskSpec(Model):
    task_id: str
    upstream: list[str]
    level: int
    trigger_rule: str
    mapped_over: str | None
    control: str | None = Field(
        default=None,
        description="branch, short_circuit (skips everything downstream) or short_circuit_direct "
        "(skips its direct downstream): its result decides which tasks below it run",
    )
    retries: int
    queue: str | None


class Edge(Model):
    from_: str = Field(alias="from")
    to: str
    kind: Literal["data", "order"]

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


class TaskGroup(Model):
    group_id: str = Field(description="prefixed by its parents': etl.extract")
    parent: str | None
    tooltip: str
    tasks: list[str] = Field(description="every task of the group and of its nested groups")


class DagDetail(DagBase):
    max_active_runs: int | None
    catchup: bool
    params: list[Param]
    tasks: list[TaskSpec]
    edges: list[Edge]
    groups: list[TaskGroup] = Field(default_factory=list)


class GridRun(Model):
    run_id: str
    state: str
    when: str | None = Field(None, description="the run's logical date, else when it was queued")
    duration_seconds: float | None = None
    height: int = Field(0, description="the duration bar in pixels (44: the longest run shown)")


class GridRow(Model):
    task_id: str
    states: list[str]
    group: str | None = Field(default=None, description="the task group it is in, innermost")
    depth: int = Field(default=0, description="how many task groups it is nested in")


class GridLine(Model):
    kind: Literal["group", "task"]
    id: str
    depth: int


class Grid(Model):
    runs: list[GridRun]
    tasks: list[GridRow]
    rows: list[GridLine] = Field(
        default_factory=list, description="the grid's lines: each task group before its tasks"
    )


class Paused(Model):
    dag_id: str
    paused: bool


# ---------------------------------------------------------------------- runs


class DagRun(Model):
    dag_id: str
    run_id: str
    logical_date: Timestamp | None
    trigger: str
    state: str
    conf: dict[str, Any] | None
    queued_at: Timestamp | None
    started_at: Timestamp | None
    ended_at: Timestamp | None
    duration_seconds: float | None
    leader_epoch: int | None


class TaskRun(Model):
    task_id: str
    map_index: int
    state: str
    try_number: int
    tries_before: int = Field(
        description="tries made before the last clear or replay; the retry policy counts the "
        "tries after them"
    )
    dedupe_key: str
    worker: str | None
    started_at: Timestamp | None
    ended_at: Timestamp | None
    duration_seconds: float | None
    result: Any = Field(description="left out (null) here: read the task run")
    error: str | None = Field(description=SKIP_REASON)


class RunDetail(DagRun):
    tasks: list[TaskRun]


class RunPage(Model):
    runs: list[DagRun]
    next_cursor: int | None


class InstanceStatus(Model):
    state: str
    try_number: int
    duration_seconds: float | None


class RunStatus(Model):
    state: str
    final: bool
    tasks: dict[str, str] = Field(description="task id -> state (a map: its worst instance)")
    instances: dict[str, InstanceStatus] = Field(description='"task" or "task[i]" -> status')


# ---------------------------------------------------------------------- task runs


class ResultPreview(Model):
    preview: str
    bytes: int
    truncated: bool


_POKES = "a sensor in reschedule mode (null for other task runs): its pokes "


class TaskRunDetail(Model):
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    state: str
    try_number: int
    tries_before: int = Field(
        description="tries made before the last clear or replay; the retry policy counts the "
        "tries after them"
    )
    dedupe_key: str
    worker: str | None
    started_at: Timestamp | None
    ended_at: Timestamp | None
    duration_seconds: float | None
    error: str | None = Field(description=SKIP_REASON)
    celery_task_id: str | None
    traceback: str | None
    result: ResultPreview
    flower_url: str | None
    poke_count: int | None = Field(None, description=_POKES + "not done so far in this try")
    first_poke_at: Timestamp | None = Field(None, description=_POKES + "this try's first: "
                                            "the sensor's timeout runs from it")  # fmt: skip
    next_poke_at: Timestamp | None = Field(None, description=_POKES + "the next, while it is "
                                           "up_for_reschedule")  # fmt: skip


class Try(Model):
    try_number: int
    first_log_at: Timestamp | None
    last_log_at: Timestamp | None
    state: str | None = Field(description="the latest try's only: earlier outcomes are not kept")
    error: str | None


class Tries(Model):
    tries: list[Try]
    latest: int


class LogLine(Model):
    try_number: int
    ts: Timestamp
    level: str
    logger: str
    message: str
    exc_info: str | None = None


class Logs(Model):
    lines: list[LogLine]
    truncated: bool


# ---------------------------------------------------------------------- dead letters, audit


class DeadLetter(Model):
    id: int
    dedupe_key: str
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    tries: int
    error: str | None
    args: Any
    conf: Any
    created_at: Timestamp | None
    replayed_at: Timestamp | None
    closed_at: Timestamp | None = Field(description="closed as stale: a replay is refused")
    closed_reason: str | None = Field(description="who closed it and why")
    traceback: str | None


class DeadLetterPage(Model):
    dead_letters: list[DeadLetter]
    next_cursor: int | None


class AuditRecord(Model):
    at: Timestamp
    actor: str
    action: str
    dag_id: str | None
    run_id: str | None
    detail: dict[str, Any]


class AuditPage(Model):
    audit: list[AuditRecord]
