"""Dead letters: task runs that exhausted their retries, kept with their arguments, conf and
traceback so an operator can read them and replay them (``beatflow dlq``). Starting a replay is
one transaction, and only from an open dead letter (neither replayed nor closed) whose task run
is still failed. A letter is closed, stale, when what it stands for no longer holds: its run was
marked by an operator, its task run cleared, or a newer letter of the same task run written."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlalchemy as sa

from beatflow.errors import BeatflowError, DeadLetterNotFoundError, DeadLetterStaleError
from beatflow.store.audit import audit_insert
from beatflow.store.base import StoreBase
from beatflow.store.engine import utcnow
from beatflow.store.models import dead_letters, task_runs
from beatflow.store.records import (
    TASK_CLEARED,
    TASK_FAILED,
    TASK_RUN_TERMINAL_STATES,
    TASK_SUCCESS,
    AuditNote,
    DeadLetterDraft,
    DeadLetterRecord,
)
from beatflow.store.rows import dead_letter_record
from beatflow.store.sql import check_conf
from beatflow.store.text import ERROR_MAX_CHARS, TRACEBACK_MAX_CHARS, clean_text

d = dead_letters.c
# a letter neither replayed nor closed: a replay may still run it
OPEN = sa.and_(d.replayed_at.is_(None), d.closed_at.is_(None))


def close_open_letters(where: sa.ColumnElement[bool], reason: str) -> sa.Executable:
    """The update that closes the open dead letters matching ``where`` with ``reason`` (who
    and why), returning their ids: for the transaction of the change that made them stale."""
    return (
        sa.update(dead_letters)
        .where(where, OPEN)
        .values(closed_at=utcnow(), closed_reason=clean_text(reason, ERROR_MAX_CHARS))
        .returning(d.id)
    )


def dead_letter_values(
    *,
    dedupe_key: str,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    error: str | None,
    traceback: str | None,
    letter: DeadLetterDraft,
) -> dict[str, Any]:
    """The row of a new dead letter (its conf and args checked, its text cleaned)."""
    what = f"dead letter of task run {dedupe_key!r}"
    return {
        "dedupe_key": dedupe_key,
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": map_index,
        "args": check_conf(letter.args, f"args of the {what}"),
        "conf": check_conf(letter.conf, f"conf of the {what}"),
        "error": clean_text(error, ERROR_MAX_CHARS),
        "traceback": clean_text(traceback, TRACEBACK_MAX_CHARS),
        "tries": letter.tries,
        "created_at": utcnow(),
    }


def insert_dead_letter(
    conn: sa.Connection,
    dedupe_key: str,
    error: str | None,
    traceback: str | None,
    letter: DeadLetterDraft,
    **identity: Any,
) -> None:
    """Insert the dead letter of the task run just failed on ``conn`` (its transaction), and
    close the older open letters of the same task run: this one supersedes them (a replay of
    an older one would run the task again for a failure already replaced by this one).
    ``identity``: its dag_id, run_id, task_id and map_index."""
    values = dead_letter_values(
        dedupe_key=dedupe_key, error=error, traceback=traceback, letter=letter, **identity
    )
    new_id = conn.execute(sa.insert(dead_letters).values(**values).returning(d.id)).scalar_one()
    conn.execute(
        close_open_letters(
            sa.and_(d.dedupe_key == dedupe_key, d.id < new_id),
            f"superseded by dead letter {new_id} of the same task run",
        )
    )


class DeadLettersMixin(StoreBase):
    def add_dead_letter(
        self,
        *,
        dedupe_key: str,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int,
        args: dict[str, Any],
        conf: dict[str, Any],
        error: str,
        traceback: str | None,
        tries: int,
    ) -> int:
        """Record a task run that exhausted its retries; returns the dead letter's id. (The node
        wrapper writes its letters with the failed row instead: ``finish_task_run`` and
        ``fail_task_run`` take a ``letter``.)"""
        what = f"dead letter of task run {dedupe_key!r}"
        values = dead_letter_values(
            dedupe_key=dedupe_key,
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            map_index=map_index,
            error=error,
            traceback=traceback,
            letter=DeadLetterDraft(args=args, conf=conf, tries=tries),
        )
        with self._write(f"adding a {what}", transaction=True) as conn:
            new_id = conn.execute(
                sa.insert(dead_letters).values(**values).returning(dead_letters.c.id)
            ).scalar_one()
            conn.execute(
                close_open_letters(
                    sa.and_(d.dedupe_key == dedupe_key, d.id < new_id),
                    f"superseded by dead letter {new_id} of the same task run",
                )
            )
        return int(new_id)

    def list_dead_letters(
        self, dag_id: str | None = None, *, include_replayed: bool = False, limit: int = 100
    ) -> list[DeadLetterRecord]:
        """Dead letters, newest first; replayed and closed (stale) ones only if asked."""
        query = sa.select(dead_letters).order_by(dead_letters.c.id.desc()).limit(max(0, limit))
        if dag_id is not None:
            query = query.where(dead_letters.c.dag_id == dag_id)
        if not include_replayed:
            query = query.where(OPEN)
        with self._read("listing dead letters") as conn:
            return [dead_letter_record(r) for r in conn.execute(query).mappings()]

    def get_dead_letter(self, id: int) -> DeadLetterRecord | None:
        with self._read(f"reading dead letter {id}") as conn:
            row = (
                conn.execute(sa.select(dead_letters).where(dead_letters.c.id == id))
                .mappings()
                .first()
            )
        return None if row is None else dead_letter_record(row)

    def start_replay(
        self,
        id: int,
        downstream: Collection[str] = (),
        *,
        audit: AuditNote | None = None,
    ) -> DeadLetterRecord:
        """In one transaction: stamp the dead letter replayed, make its task run (which must
        still be ``failed``) ``cleared``, to run again as new tries with its full retry policy,
        and do the same to the unsuccessful finished task runs of ``downstream`` (task ids) in
        its DAG run; write ``audit`` (the operator's record). Nothing changes if any check
        fails: a letter closed as stale raises DeadLetterStaleError with the reason it was
        closed; one replayed already, or whose task run is no longer failed (it succeeded
        since, or a stale worker's letter), raises BeatflowError."""
        with self._write(f"replaying dead letter {id}", transaction=True) as conn:
            row = (
                conn.execute(sa.select(dead_letters).where(dead_letters.c.id == id))
                .mappings()
                .first()
            )
            if row is None:
                raise DeadLetterNotFoundError(id)
            letter = dead_letter_record(row)
            if letter.closed_at is not None:
                raise DeadLetterStaleError(id, letter.closed_reason or "closed")
            stamped = conn.execute(
                sa.update(dead_letters)
                .where(dead_letters.c.id == id, OPEN)
                .values(replayed_at=utcnow())
            ).rowcount
            if stamped != 1:
                raise BeatflowError(f"dead letter {id} was replayed already")
            reset = {
                "state": TASK_CLEARED,
                "tries_before": task_runs.c.try_number,
                "lease_token": None,
                "lease_expires_at": None,
            }
            own = conn.execute(
                sa.update(task_runs)
                .where(
                    task_runs.c.dedupe_key == letter.dedupe_key, task_runs.c.state == TASK_FAILED
                )
                .values(**reset)
            ).rowcount
            if own != 1:
                state = conn.execute(
                    sa.select(task_runs.c.state).where(task_runs.c.dedupe_key == letter.dedupe_key)
                ).scalar()
                raise BeatflowError(
                    f"dead letter {id}: its task run {letter.dedupe_key!r} is "
                    f"{state or 'gone'}, not failed; nothing to replay"
                )
            if downstream:
                conn.execute(
                    sa.update(task_runs)
                    .where(
                        task_runs.c.dag_id == letter.dag_id,
                        task_runs.c.run_id == letter.run_id,
                        task_runs.c.task_id.in_(sorted(downstream)),
                        task_runs.c.state.in_(sorted(TASK_RUN_TERMINAL_STATES - {TASK_SUCCESS})),
                    )
                    .values(**reset)
                )
            if audit is not None:
                conn.execute(audit_insert(audit, letter.dag_id, letter.run_id, dead_letter=id))
        return letter

    def mark_dead_letter_replayed(self, id: int) -> None:
        """Stamp replayed_at (once); the dead letter leaves the default listing."""
        with self._write(f"marking dead letter {id} replayed") as conn:
            conn.execute(
                sa.update(dead_letters)
                .where(dead_letters.c.id == id, OPEN)
                .values(replayed_at=utcnow())
            )

    def purge_dead_letters(
        self, dag_id: str | None = None, *, audit: AuditNote | None = None
    ) -> int:
        """Delete dead letters (of one DAG, or all); returns how many were deleted. ``audit``:
        the operator's record, with ``deleted`` in its detail, written in the same transaction
        (both commit, or neither)."""
        delete = sa.delete(dead_letters)
        if dag_id is not None:
            delete = delete.where(dead_letters.c.dag_id == dag_id)
        with self._write("purging dead letters", transaction=audit is not None) as conn:
            deleted = int(conn.execute(delete).rowcount)
            if audit is not None:
                conn.execute(audit_insert(audit, dag_id, None, deleted=deleted))
            return deleted

    def count_dead_letters(self) -> int:
        """Open dead letters, neither replayed nor closed (the exporter's dead-letter depth)."""
        query = sa.select(sa.func.count()).where(OPEN)
        with self._read("counting dead letters") as conn:
            return int(conn.execute(query).scalar_one())
