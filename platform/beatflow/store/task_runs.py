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
from typing import Any

from beatflow.errors import StoreError
from beatflow.store.base import StoreBase
from beatflow.store.claim_sql import fresh_lease, lease_clock
from beatflow.store.dead_letters import insert_dead_letter
from beatflow.store.engine import utcnow
from beatflow.store.fan_in_sql import completed, count_up
from beatflow.store.records import (
    TASK_FAILED,
    TASK_RUN_FINISH_STATES,
    TASK_RUN_TERMINAL_STATES,
    TASK_RUNNING,
    TASK_SKIPPED,
    TASK_SUCCESS,
    Claim,
    DeadLetterDraft,
    TaskRunEnded,
)
from beatflow.store.rows import task_run_record
from beatflow.store.task_states import decided_upsert
from beatflow.store.text import ERROR_MAX_CHARS, TRACEBACK_MAX_CHARS, clean_text

# how often a claim retries when the row changes between its statements (e.g. a concurrent reset)
_CLAIM_ATTEMPTS = 5


def _identity(row: Any) -> tuple[Any, Any, Any, Any]:
    return row["dag_id"], row["run_id"], row["task_id"], row["map_index"]


# the finishes that end an instance (up_for_retry does not)
_COUNTED = frozenset({TASK_SUCCESS, TASK_FAILED, TASK_SKIPPED})


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
        sql = self._backend.claims
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
            return conn.execute(self._backend.claims.renew, params).rowcount == 1

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
        """Record the outcome of a claimed task run (success, failed, up_for_retry or skipped,
        the reason of a skip in ``error``). Applies
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
        if letter is None:  # every task run's: one round trip where the backend has one
            ended = self._backend.finish_alone(self._db, action, params, counts=counts)
            if ended is not None:
                return ended
        with self._write(action, transaction=letter is not None or counts) as conn:
            row = conn.execute(self._backend.claims.finish, params).mappings().first()
            if row is None:
                return TaskRunEnded(False)
            if letter is not None:
                error, tb = params["p_error"], params["p_traceback"]
                insert_dead_letter(conn, dedupe_key, error, tb, letter, **row)
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
            written = conn.execute(self._backend.claims.fail, params).rowcount == 1
            if not written:
                upsert = decided_upsert(
                    self._backend, dedupe_key, state=TASK_FAILED, error=error, **identity
                )
                written = conn.execute(upsert).first() is not None
            if not written:
                return TaskRunEnded(False)
            if letter is not None:
                insert_dead_letter(conn, dedupe_key, error, traceback, letter, **identity)
            if map_index < 0:
                return TaskRunEnded(True)
            counted = conn.execute(count_up(dag_id, run_id, task_id, map_index))
            return TaskRunEnded(True, completed(counted.mappings().first()))
