"""Task logs: what a task run logged, kept per try in batches of lines (written by the worker's
log capture, read by the web UI), pruned with their DAG runs by ``beatflow db prune``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.store.base import StoreBase
from beatflow.store.engine import UTCDateTime, utcnow
from beatflow.store.models import task_logs


@dataclass(frozen=True, slots=True)
class TaskLogBatch:
    """Log lines of one try of one task run; each line is {ts, level, logger, message, ...}."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    lines: list[dict[str, Any]]
    created_at: datetime | None = None


class TaskLogsMixin(StoreBase):
    def add_task_logs(self, batches: Sequence[TaskLogBatch]) -> None:
        """Write several batches in one transaction (the capture handler's flush)."""
        if not batches:
            return
        now = utcnow()
        rows = [
            {
                "dag_id": b.dag_id,
                "run_id": b.run_id,
                "task_id": b.task_id,
                "map_index": b.map_index,
                "try_number": b.try_number,
                "created_at": b.created_at or now,
                "lines": b.lines,
            }
            for b in batches
            if b.lines
        ]
        if not rows:
            return
        with self._write(f"writing {len(rows)} task log batches") as conn:
            conn.execute(sa.insert(task_logs), rows)

    def get_task_logs(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int = -1,
        *,
        try_number: int | None = None,
        limit: int = 5000,
    ) -> list[dict[str, Any]]:
        """Log lines of a task run (one try, or all tries in order), each with ``try_number``;
        at most ``limit`` lines."""
        where = [
            task_logs.c.dag_id == dag_id,
            task_logs.c.run_id == run_id,
            task_logs.c.task_id == task_id,
            task_logs.c.map_index == map_index,
        ]
        if try_number is not None:
            where.append(task_logs.c.try_number == try_number)
        query = (
            sa.select(task_logs.c.try_number, task_logs.c.lines)
            .where(*where)
            .order_by(task_logs.c.try_number, task_logs.c.id)
        )
        out: list[dict[str, Any]] = []
        with self._read(f"reading the logs of task run {dag_id}/{run_id}/{task_id}") as conn:
            for number, lines in conn.execute(query):
                for line in lines or ():
                    if len(out) >= limit:
                        return out
                    out.append({**line, "try_number": number})
        return out

    def task_log_tries(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> list[dict[str, Any]]:
        """Per try that logged: try_number, first and last capture time, batches."""
        query = (
            sa.select(
                task_logs.c.try_number,
                sa.func.min(task_logs.c.created_at, type_=UTCDateTime()),
                sa.func.max(task_logs.c.created_at, type_=UTCDateTime()),
                sa.func.count(),
            )
            .where(
                task_logs.c.dag_id == dag_id,
                task_logs.c.run_id == run_id,
                task_logs.c.task_id == task_id,
                task_logs.c.map_index == map_index,
            )
            .group_by(task_logs.c.try_number)
            .order_by(task_logs.c.try_number)
        )
        with self._read(f"reading the tries of task run {dag_id}/{run_id}/{task_id}") as conn:
            rows = conn.execute(query).all()
        return [
            {"try_number": n, "first_log_at": a, "last_log_at": b, "batches": c}
            for n, a, b, c in rows
        ]
