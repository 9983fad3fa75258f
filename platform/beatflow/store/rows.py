"""Rows as records: the mapping of a result row (plain, or with prefixed column names when a read
joins a run to its task runs) to the records the store hands out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from beatflow.store.records import DagRunRecord, DeadLetterRecord, TaskRunRecord


def dag_run_record(row: Mapping[Any, Any], prefix: str = "") -> DagRunRecord:
    """The DAG run of ``row``, whose columns are named ``prefix`` + the column's name (a read
    that joins the run to its task runs names the run's columns ``r_...``)."""
    p = prefix
    return DagRunRecord(
        dag_id=row[p + "dag_id"],
        run_id=row[p + "run_id"],
        logical_date=row[p + "logical_date"],
        trigger=row[p + "trigger"],
        conf=dict(row[p + "conf"] or {}),
        state=row[p + "state"],
        queued_at=row[p + "queued_at"],
        started_at=row[p + "started_at"],
        ended_at=row[p + "ended_at"],
        leader_epoch=row[p + "leader_epoch"],
        failure_reason=row.get(p + "failure_reason"),
        resume_count=row.get(p + "resume_count") or 0,
        followed=bool(row.get(p + "followed")),
    )


def task_run_record(row: Mapping[Any, Any], prefix: str = "") -> TaskRunRecord:
    """The task run of ``row``, whose columns are named ``prefix`` + the column's name."""
    p = prefix
    return TaskRunRecord(
        dedupe_key=row[p + "dedupe_key"],
        dag_id=row[p + "dag_id"],
        run_id=row[p + "run_id"],
        task_id=row[p + "task_id"],
        map_index=row[p + "map_index"],
        state=row[p + "state"],
        try_number=row[p + "try_number"],
        worker=row[p + "worker"],
        celery_task_id=row[p + "celery_task_id"],
        lease_expires_at=row[p + "lease_expires_at"],
        started_at=row[p + "started_at"],
        ended_at=row[p + "ended_at"],
        result=row[p + "result"],
        error=row[p + "error"],
        traceback=row[p + "traceback"],
        map_count=row.get(p + "map_count"),
        deduped_from=row.get(p + "deduped_from"),
        tries_before=row.get(p + "tries_before") or 0,
    )


def dead_letter_record(row: sa.RowMapping) -> DeadLetterRecord:
    return DeadLetterRecord(
        id=row["id"],
        dedupe_key=row["dedupe_key"],
        dag_id=row["dag_id"],
        run_id=row["run_id"],
        task_id=row["task_id"],
        map_index=row["map_index"],
        args=dict(row["args"] or {}),
        conf=dict(row["conf"] or {}),
        error=row["error"],
        traceback=row["traceback"],
        tries=row["tries"],
        created_at=row["created_at"],
        replayed_at=row["replayed_at"],
        closed_at=row.get("closed_at"),
        closed_reason=row.get("closed_reason"),
    )
