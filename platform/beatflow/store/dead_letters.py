"""Dead letters: task runs that exhausted their retries, kept with their arguments, conf and
traceback so an operator can read them and replay them (``beatflow dlq``)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from beatflow.store.base import StoreBase, dead_letter_record
from beatflow.store.dag_runs import check_conf
from beatflow.store.engine import utcnow
from beatflow.store.models import dead_letters
from beatflow.store.records import DeadLetterRecord


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
        """Record a task run that exhausted its retries; returns the dead letter's id."""
        what = f"dead letter of task run {dedupe_key!r}"
        values = {
            "dedupe_key": dedupe_key,
            "dag_id": dag_id,
            "run_id": run_id,
            "task_id": task_id,
            "map_index": map_index,
            "args": check_conf(args, f"args of the {what}"),
            "conf": check_conf(conf, f"conf of the {what}"),
            "error": error,
            "traceback": traceback,
            "tries": tries,
            "created_at": utcnow(),
        }
        with self._write(f"adding a {what}") as conn:
            new_id = conn.execute(
                sa.insert(dead_letters).values(**values).returning(dead_letters.c.id)
            ).scalar_one()
        return int(new_id)

    def list_dead_letters(
        self, dag_id: str | None = None, *, include_replayed: bool = False, limit: int = 100
    ) -> list[DeadLetterRecord]:
        """Dead letters, newest first; replayed ones only if asked."""
        query = sa.select(dead_letters).order_by(dead_letters.c.id.desc()).limit(max(0, limit))
        if dag_id is not None:
            query = query.where(dead_letters.c.dag_id == dag_id)
        if not include_replayed:
            query = query.where(dead_letters.c.replayed_at.is_(None))
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

    def mark_dead_letter_replayed(self, id: int) -> None:
        """Stamp replayed_at (once); the dead letter leaves the default listing."""
        with self._write(f"marking dead letter {id} replayed") as conn:
            conn.execute(
                sa.update(dead_letters)
                .where(dead_letters.c.id == id, dead_letters.c.replayed_at.is_(None))
                .values(replayed_at=utcnow())
            )

    def purge_dead_letters(self, dag_id: str | None = None) -> int:
        """Delete dead letters (of one DAG, or all); returns how many were deleted."""
        delete = sa.delete(dead_letters)
        if dag_id is not None:
            delete = delete.where(dead_letters.c.dag_id == dag_id)
        with self._write("purging dead letters") as conn:
            return int(conn.execute(delete).rowcount)

    def count_dead_letters(self) -> int:
        """Dead letters not replayed yet (the exporter's dead-letter depth)."""
        query = sa.select(sa.func.count()).where(dead_letters.c.replayed_at.is_(None))
        with self._read("counting dead letters") as conn:
            return int(conn.execute(query).scalar_one())
