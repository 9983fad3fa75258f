"""Task-run rows apart from the claim protocol (``task_runs``): states decided without running
the task (upstream_failed, skipped, failed before it could start), a row deduped from another
run, the reads of one task run or of a DAG run's, the reset of a replay, and the stuck count."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.errors import StoreError
from beatflow.store.backends import Backend
from beatflow.store.base import StoreBase
from beatflow.store.dead_letters import insert_dead_letter
from beatflow.store.engine import require_aware, utcnow
from beatflow.store.models import is_running, task_runs
from beatflow.store.records import (
    TASK_FAILED,
    TASK_RUN_DECIDED_STATES,
    TASK_RUN_TERMINAL_STATES,
    TASK_RUN_WAITING_STATES,
    TASK_UP_FOR_RETRY,
    DeadLetterDraft,
    TaskRunRecord,
)
from beatflow.store.rows import task_run_record
from beatflow.store.text import ERROR_MAX_CHARS, clean_text


class TaskStatesMixin(StoreBase):
    def record_deduped(
        self, dedupe_key: str, *, run_id: str, source: TaskRunRecord
    ) -> TaskRunRecord:
        """This run's row for a task whose (custom) dedupe key was done by another run: final,
        with the stored result and ``deduped_from`` naming that run, under this run's default
        ``dedupe_key``. Insert-or-ignore; returns the row as stored."""
        values = {
            "dedupe_key": dedupe_key,
            "dag_id": source.dag_id,
            "run_id": run_id,
            "task_id": source.task_id,
            "map_index": source.map_index,
            "state": source.state,
            "try_number": 0,
            "result": source.result,
            "error": clean_text(source.error, ERROR_MAX_CHARS),
            "map_count": source.map_count,
            "deduped_from": source.deduped_from or source.run_id,
            "ended_at": utcnow(),
        }
        insert = (
            self._insert(task_runs)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["dedupe_key"])
        )
        with self._write(f"recording deduped task run {dedupe_key!r}") as conn:
            conn.execute(insert)
        row = self.get_task_run(dedupe_key)
        if row is None:
            raise StoreError(f"task run {dedupe_key!r} vanished right after it was written")
        return row

    def set_task_state(
        self,
        dedupe_key: str,
        *,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int = -1,
        state: str,
        error: str | None = None,
        letter: DeadLetterDraft | None = None,
    ) -> bool:
        """Record a state decided without running the task (upstream_failed, skipped, or failed
        before it could start). Inserts the row, or updates one that waits to run again
        (``cleared``: reset by a replay or a clear, whose upstream failed again); a final
        or claimed row is left alone. ``letter``: with ``failed``, the dead letter written in
        the same transaction. Returns True only if this call wrote it."""
        if state not in TASK_RUN_DECIDED_STATES:
            raise StoreError(
                f"cannot set task run {dedupe_key!r} to {state!r} without running it; "
                f"expected one of {', '.join(sorted(TASK_RUN_DECIDED_STATES))}"
            )
        if letter is not None and state != TASK_FAILED:
            raise StoreError(f"task run {dedupe_key!r}: only a failed task run has a dead letter")
        identity: dict[str, Any] = {
            "dag_id": dag_id,
            "run_id": run_id,
            "task_id": task_id,
            "map_index": map_index,
        }
        upsert = decided_upsert(self._backend, dedupe_key, state=state, error=error, **identity)
        with self._write(
            f"setting task run {dedupe_key!r} to {state}", transaction=letter is not None
        ) as conn:
            written = conn.execute(upsert).first() is not None
            if written and letter is not None:
                insert_dead_letter(conn, dedupe_key, error, None, letter, **identity)
            return written

    def get_task_run(self, dedupe_key: str) -> TaskRunRecord | None:
        with self._read(f"reading task run {dedupe_key!r}") as conn:
            row = (
                conn.execute(sa.select(task_runs).where(task_runs.c.dedupe_key == dedupe_key))
                .mappings()
                .first()
            )
        return None if row is None else task_run_record(row)

    def get_task_run_by_celery_id(self, celery_task_id: str) -> TaskRunRecord | None:
        """The task run whose latest try is the Celery task ``celery_task_id`` (None: none)."""
        query = sa.select(task_runs).where(task_runs.c.celery_task_id == celery_task_id)
        with self._read(f"reading the task run of Celery task {celery_task_id!r}") as conn:
            row = conn.execute(query.limit(1)).mappings().first()
        return None if row is None else task_run_record(row)

    def get_task_runs(
        self, dag_id: str, run_id: str, task_ids: Collection[str] | None = None
    ) -> list[TaskRunRecord]:
        """The task runs of one DAG run (only those of ``task_ids`` when given) by start time
        (never started: last), task, map index."""
        where = [task_runs.c.dag_id == dag_id, task_runs.c.run_id == run_id]
        if task_ids is not None:
            where.append(task_runs.c.task_id.in_(sorted(task_ids)))
        query = (
            sa.select(task_runs)
            .where(*where)
            .order_by(
                task_runs.c.started_at.asc().nulls_last(),
                task_runs.c.task_id,
                task_runs.c.map_index,
            )
        )
        with self._read(f"reading the task runs of DAG run {dag_id}/{run_id}") as conn:
            rows = conn.execute(query).mappings().all()
        return [task_run_record(r) for r in rows]

    def reset_task_run(self, dedupe_key: str) -> bool:
        """For replay: a terminal task run goes back to up_for_retry, so the next claim runs it
        as a new try under the same dedupe key. False if it is not terminal (or missing)."""
        with self._write(f"resetting task run {dedupe_key!r}") as conn:
            updated = conn.execute(
                sa.update(task_runs)
                .where(
                    task_runs.c.dedupe_key == dedupe_key,
                    task_runs.c.state.in_(TASK_RUN_TERMINAL_STATES),
                )
                .values(state=TASK_UP_FOR_RETRY, lease_token=None, lease_expires_at=None)
            )
            return updated.rowcount == 1

    def count_stuck_task_runs(self, now: datetime | None = None) -> int:
        """Task runs still 'running' whose lease expired: their worker died or hangs."""
        at = utcnow() if now is None else require_aware(now, "now")
        query = sa.select(sa.func.count()).where(
            is_running(task_runs.c.state), task_runs.c.lease_expires_at < at
        )
        with self._read("counting stuck task runs") as conn:
            return int(conn.execute(query).scalar_one())


def decided_upsert(
    backend: Backend,
    dedupe_key: str,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    state: str,
    error: str | None,
) -> sa.Executable:
    """Insert a decided row, or update one that waits to run again (``up_for_retry``,
    ``cleared``); returns its id when it
    wrote (see ``set_task_state``)."""
    insert = backend.insert(task_runs).values(
        dedupe_key=dedupe_key,
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=map_index,
        state=state,
        try_number=0,
        error=clean_text(error, ERROR_MAX_CHARS),
        ended_at=utcnow(),
    )
    return insert.on_conflict_do_update(
        index_elements=["dedupe_key"],
        set_={
            "state": insert.excluded.state,
            "error": insert.excluded.error,
            "ended_at": insert.excluded.ended_at,
            "lease_token": None,
            "lease_expires_at": None,
        },
        where=task_runs.c.state.in_(sorted(TASK_RUN_WAITING_STATES)),
    ).returning(task_runs.c.id)
