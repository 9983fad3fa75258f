"""Pure detection rules, no I/O: when a DAG run has missed its SLA (not finished by logical date
+ ``sla``) and when a task run is stuck (still running past its time limit, or its lease
expired because its worker died or hangs)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from beatflow.dag.model import DAG
from beatflow.store.records import (
    DAG_RUN_FINISHED_STATES,
    TASK_RUNNING,
    DagRunRecord,
    TaskRunRecord,
)

LEASE_EXPIRED = "lease_expired"
PAST_TIME_LIMIT = "past_time_limit"


@dataclass(frozen=True, slots=True)
class SlaMiss:
    """A DAG run that was not finished by its deadline."""

    dag_id: str
    run_id: str
    logical_date: datetime
    deadline: datetime
    state: str

    @property
    def key(self) -> str:
        return f"{self.dag_id}/{self.run_id}"


@dataclass(frozen=True, slots=True)
class StuckTaskRun:
    """A task run that should have ended (or been renewed) by now."""

    dedupe_key: str
    dag_id: str
    run_id: str
    task_id: str
    worker: str | None
    reason: str  # LEASE_EXPIRED or PAST_TIME_LIMIT
    since: datetime


def sla_miss(
    dag: DAG, run: DagRunRecord, now: datetime, lookback: timedelta = timedelta(days=1)
) -> SlaMiss | None:
    """The miss if ``run`` of ``dag`` was not finished by ``logical_date + dag.sla``.

    Deadlines older than ``lookback`` are ignored, so a fresh exporter does not report history.
    """
    if dag.sla is None or run.logical_date is None:
        return None
    deadline = run.logical_date + dag.sla
    if deadline > now or deadline < now - lookback:
        return None
    finished = run.state in DAG_RUN_FINISHED_STATES and run.ended_at is not None
    if finished and run.ended_at is not None and run.ended_at <= deadline:
        return None
    return SlaMiss(dag.dag_id, run.run_id, run.logical_date, deadline, run.state)


def stuck_reason(
    task_run: TaskRunRecord, time_limit: float | None, now: datetime
) -> tuple[str, datetime] | None:
    """Why ``task_run`` is stuck and since when, or None if it is not."""
    if task_run.state != TASK_RUNNING:
        return None
    if task_run.lease_expires_at is not None and task_run.lease_expires_at < now:
        return LEASE_EXPIRED, task_run.lease_expires_at
    if time_limit is not None and task_run.started_at is not None:
        limit_at = task_run.started_at + timedelta(seconds=time_limit)
        if limit_at < now:
            return PAST_TIME_LIMIT, limit_at
    return None


def find_stuck(
    task_runs: list[TaskRunRecord], dag: DAG | None, default_time_limit: float, now: datetime
) -> list[StuckTaskRun]:
    """The stuck task runs among ``task_runs`` (of one DAG run of ``dag``)."""
    out: list[StuckTaskRun] = []
    for t in task_runs:
        spec = dag.tasks.get(t.task_id) if dag is not None else None
        limit = spec.time_limit if spec is not None and spec.time_limit else default_time_limit
        found = stuck_reason(t, limit, now)
        if found is not None:
            reason, since = found
            out.append(
                StuckTaskRun(t.dedupe_key, t.dag_id, t.run_id, t.task_id, t.worker, reason, since)
            )
    return out
