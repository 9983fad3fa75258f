"""Task runs and the claim protocol: a dedupe key is claimed with an atomic insert-or-conflict
followed by a conditional UPDATE (never read-then-write), so however many workers receive the
same message, one runs it, the others wait for it or get its stored result.

A claim carries a lease (token + expiry). The holder renews it while it runs; a lease that
expires means its worker died, and the next claim takes the task run over as a new try. Only
the current token can finish a task run, so a worker whose lease was taken over cannot
overwrite its successor. Lease times come from the database's clock (see claim_sql).

Text written to the database (errors, tracebacks) is sanitised first: NUL bytes, which
PostgreSQL refuses in text, are replaced and sizes are capped, so recording a failure can
never itself fail on what the error says (store/text.py).

A task run that fails for good and its dead letter are one transaction: a call that writes the
``failed`` row with a ``letter`` writes the letter too, or neither, so a database blip between
them can never leave a failed task run without its letter (``beatflow dlq`` would miss it) or a
letter for a row that did not fail."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.errors import StoreError
from beatflow.store.base import StoreBase, task_run_record
from beatflow.store.claim_sql import claim_statements, fresh_lease, lease_clock
from beatflow.store.dead_letters import dead_letter_values
from beatflow.store.engine import dumps_json, require_aware, utcnow
from beatflow.store.fan_ins import completed, count_up
from beatflow.store.models import dead_letters, is_running, task_runs
from beatflow.store.records import (
    TASK_FAILED,
    TASK_RUN_DECIDED_STATES,
    TASK_RUN_FINISH_STATES,
    TASK_RUN_TERMINAL_STATES,
    TASK_RUNNING,
    TASK_SUCCESS,
    TASK_UP_FOR_RETRY,
    Claim,
    DeadLetterDraft,
    TaskRunEnded,
    TaskRunRecord,
)
from beatflow.store.text import ERROR_MAX_CHARS, TRACEBACK_MAX_CHARS, clean_text

# how often a claim retries when the row changes between its statements (e.g. a concurrent reset)
_CLAIM_ATTEMPTS = 5


def _pg_finish() -> sa.Executable:
    """The finish on PostgreSQL (``claim_statements(...).finish``), for ``driver_statement``."""
    return claim_statements("postgresql").finish


def _pg_finish_counted() -> sa.Executable:
    """The finish of a .map() instance on PostgreSQL: the finish and its count in the fan-in
    (``fan_ins.count_up``) in one statement; the count's row, or NULLs without a fan-in."""
    finish: Any = claim_statements("postgresql").finish  # an UPDATE ... RETURNING
    fin = finish.cte("fin")
    fan = count_up(fin.c.dag_id, fin.c.run_id, fin.c.task_id, fin.c.map_index).cte("fan")
    return sa.select(fin.c.map_index, fan.c.final, fan.c.total, fan.c.canvas).select_from(
        fin.outerjoin(fan, sa.true())
    )


def _identity(row: Any) -> tuple[Any, Any, Any, Any]:
    return row["dag_id"], row["run_id"], row["task_id"], row["map_index"]


# the finishes that end an instance (up_for_retry does not)
_COUNTED = frozenset({TASK_SUCCESS, TASK_FAILED})


class TaskRunsMixin(StoreBase):
    def claim_task_run(
        self,
        dedupe_key: str,
        *,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int = -1,
        worker: str | None = None,
        celery_task_id: str | None = None,
    ) -> Claim:
        """Claim ``dedupe_key`` before running its task: ``run`` (you hold a new lease),
        ``done`` (already terminal: use ``record``) or ``held`` (a live lease: retry later)."""
        sql = claim_statements(self.dialect)
        identity = {
            "p_dedupe_key": dedupe_key,
            "p_dag_id": dag_id,
            "p_run_id": run_id,
            "p_task_id": task_id,
            "p_map_index": map_index,
        }
        for _ in range(_CLAIM_ATTEMPTS):
            now = utcnow()
            token = uuid.uuid4().hex
            lease = {
                "p_key": dedupe_key,
                **fresh_lease(
                    now,
                    self.lease_seconds,
                    token,
                    worker=worker,
                    celery_task_id=celery_task_id,
                ),
            }
            with self._write(f"claiming task run {dedupe_key!r}") as conn:
                row = conn.execute(sql.insert, {**identity, **lease}).mappings().first()
                if row is None:
                    row = conn.execute(sql.take_over, lease).mappings().first()
                if row is not None:
                    return Claim("run", task_run_record(row), token)
                current = conn.execute(sql.current, {"p_key": dedupe_key}).mappings().first()
            if current is None:  # pruned between the statements: claim afresh
                continue
            if current["state"] in TASK_RUN_TERMINAL_STATES:
                return Claim("done", task_run_record(current), None)
            if current["state"] == TASK_RUNNING:
                # live lease, or one that expired after our UPDATE looked: either way, later
                return Claim("held", task_run_record(current), None)
        raise StoreError(
            f"could not claim task run {dedupe_key!r}: it changed state {_CLAIM_ATTEMPTS} times "
            "during the claim; retry the task"
        )

    def renew_lease(self, dedupe_key: str, token: str) -> bool:
        """Push the lease expiry out by ``lease_seconds``; False if the lease was taken over
        (the caller should stop: its result will not be recorded)."""
        params = {
            "p_key": dedupe_key,
            "p_token": token,
            **lease_clock(utcnow(), self.lease_seconds),
        }
        with self._write(f"renewing the lease of task run {dedupe_key!r}") as conn:
            return conn.execute(claim_statements(self.dialect).renew, params).rowcount == 1

    def finish_task_run(
        self,
        dedupe_key: str,
        token: str,
        *,
        state: str,
        result: Any = None,
        error: str | None = None,
        traceback: str | None = None,
        map_count: int | None = None,
        letter: DeadLetterDraft | None = None,
    ) -> bool:
        """Record the outcome of a claimed task run (success, failed or up_for_retry). Applies
        only while ``token`` holds the lease; returns False (nothing written) otherwise.
        ``map_count``: a .map() task's instance count (its expansion, recorded out of band).
        ``letter``: with ``failed``, the dead letter written in the same transaction.
        Raises ResultError, writing nothing, if ``result`` is not JSON or is too large."""
        params = self._finish_params(
            dedupe_key, token, state, result, error, traceback, letter, map_count
        )
        return self._finish(dedupe_key, params, letter, counts=False).written

    def finish_map_instance(
        self,
        dedupe_key: str,
        token: str,
        *,
        state: str,
        result: Any = None,
        error: str | None = None,
        traceback: str | None = None,
        letter: DeadLetterDraft | None = None,
    ) -> TaskRunEnded:
        """``finish_task_run`` of a .map() instance: a final state (success, failed) also
        counts the instance in its expansion's fan-in (``store/fan_ins.py``), in the same
        statement; ``fan_in`` is the canvas to continue when this one was the last to end."""
        params = self._finish_params(dedupe_key, token, state, result, error, traceback, letter)
        return self._finish(dedupe_key, params, letter, counts=state in _COUNTED)

    def _finish_params(
        self,
        dedupe_key: str,
        token: str,
        state: str,
        result: Any,
        error: str | None,
        traceback: str | None,
        letter: DeadLetterDraft | None,
        map_count: int | None = None,
    ) -> dict[str, Any]:
        if state not in TASK_RUN_FINISH_STATES:
            raise StoreError(
                f"cannot finish task run {dedupe_key!r} as {state!r}; "
                f"expected one of {', '.join(sorted(TASK_RUN_FINISH_STATES))}"
            )
        if letter is not None and state != TASK_FAILED:
            raise StoreError(f"task run {dedupe_key!r}: only a failed task run has a dead letter")
        self.check_result(dedupe_key, result)
        return {
            "p_key": dedupe_key,
            "p_token": token,
            "p_state": state,
            "p_result": result,
            "p_error": clean_text(error, ERROR_MAX_CHARS),
            "p_traceback": clean_text(traceback, TRACEBACK_MAX_CHARS),
            "p_ended_at": utcnow(),
            "p_map_count": map_count,
        }

    def _finish(
        self,
        dedupe_key: str,
        params: dict[str, Any],
        letter: DeadLetterDraft | None,
        *,
        counts: bool,
    ) -> TaskRunEnded:
        action = f"finishing task run {dedupe_key!r}"
        if letter is None and self.dialect == "postgresql":  # every task run's: the driver's
            result = params["p_result"]
            params = {**params, "p_result": None if result is None else dumps_json(result)}
            if not counts:
                return TaskRunEnded(bool(self._driver_rows(action, _pg_finish, params)))
            rows = self._driver_rows(action, _pg_finish_counted, params)
            return TaskRunEnded(bool(rows), completed(rows[0]) if rows else None)
        with self._write(action, transaction=letter is not None or counts) as conn:
            row = conn.execute(claim_statements(self.dialect).finish, params).mappings().first()
            if row is None:
                return TaskRunEnded(False)
            if letter is not None:
                error, tb = params["p_error"], params["p_traceback"]
                self._insert_letter(conn, dedupe_key, error, tb, letter, **row)
            if not counts:
                return TaskRunEnded(True)
            counted = conn.execute(count_up(*_identity(row))).mappings().first()
            return TaskRunEnded(True, completed(counted))

    def fail_task_run(
        self,
        dedupe_key: str,
        *,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int = -1,
        error: str,
        traceback: str | None = None,
        letter: DeadLetterDraft | None = None,
    ) -> TaskRunEnded:
        """Mark a task run failed whatever its worker's lease (running, up_for_retry or
        missing); a final row is left alone. For failures beatflow itself hit around a task
        (a bad DAG on this worker, a broken dedupe template): the run must still end. With
        ``letter``, its dead letter is written in the same transaction. Truthy if this call
        wrote it; a .map() instance is counted in its fan-in (``finish_map_instance``)."""
        params = {
            "p_key": dedupe_key,
            "p_error": clean_text(error, ERROR_MAX_CHARS),
            "p_traceback": clean_text(traceback, TRACEBACK_MAX_CHARS),
            "p_ended_at": utcnow(),
        }
        identity: dict[str, Any] = {
            "dag_id": dag_id,
            "run_id": run_id,
            "task_id": task_id,
            "map_index": map_index,
        }
        with self._write(f"failing task run {dedupe_key!r}", transaction=True) as conn:
            written = conn.execute(claim_statements(self.dialect).fail, params).rowcount == 1
            if not written:
                upsert = self._decided_upsert(
                    dedupe_key, state=TASK_FAILED, error=error, **identity
                )
                written = conn.execute(upsert).first() is not None
            if not written:
                return TaskRunEnded(False)
            if letter is not None:
                self._insert_letter(conn, dedupe_key, error, traceback, letter, **identity)
            if map_index < 0:
                return TaskRunEnded(True)
            counted = conn.execute(count_up(dag_id, run_id, task_id, map_index))
            return TaskRunEnded(True, completed(counted.mappings().first()))

    def _insert_letter(
        self,
        conn: sa.Connection,
        dedupe_key: str,
        error: str | None,
        traceback: str | None,
        letter: DeadLetterDraft,
        **identity: Any,
    ) -> None:
        """Insert the dead letter of the task run just failed on ``conn`` (its transaction);
        ``identity``: its dag_id, run_id, task_id and map_index."""
        values = dead_letter_values(
            dedupe_key=dedupe_key, error=error, traceback=traceback, letter=letter, **identity
        )
        conn.execute(sa.insert(dead_letters).values(**values))

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
        (``up_for_retry``: reset by a replay or a clear, whose upstream failed again); a final
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
        upsert = self._decided_upsert(dedupe_key, state=state, error=error, **identity)
        with self._write(
            f"setting task run {dedupe_key!r} to {state}", transaction=letter is not None
        ) as conn:
            written = conn.execute(upsert).first() is not None
            if written and letter is not None:
                self._insert_letter(conn, dedupe_key, error, None, letter, **identity)
            return written

    def _decided_upsert(
        self,
        dedupe_key: str,
        *,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int,
        state: str,
        error: str | None,
    ) -> sa.Executable:
        """Insert a decided row, or update one that is ``up_for_retry``; returns its id when it
        wrote (see ``set_task_state``)."""
        insert = self._insert(task_runs).values(
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
            where=task_runs.c.state == TASK_UP_FOR_RETRY,
        ).returning(task_runs.c.id)

    def get_task_run(self, dedupe_key: str) -> TaskRunRecord | None:
        with self._read(f"reading task run {dedupe_key!r}") as conn:
            row = (
                conn.execute(sa.select(task_runs).where(task_runs.c.dedupe_key == dedupe_key))
                .mappings()
                .first()
            )
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
