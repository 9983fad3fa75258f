"""A .map() expansion: the items it expands into (one ``map_items`` row per instance, each
instance reads its own), and its fan-in without a Celery chord (migration 0014): the expander
opens it (``open_fan_in``) before it sends any instance; the statement that ends an instance
counts it (``finish_map_instance``, ``fail_task_run``), and the one whose count reaches the
expansion's total returns what follows the expander in its canvas, for its worker to send.

Counting is exact under concurrency: the count's UPDATE takes the fan-in row's lock in the
transaction that ends the instance, so the increments are applied one after another, each on
the last committed count (PostgreSQL re-reads a row updated under its lock), and exactly one of
them reaches the total. ``open_fan_in`` recounts the instances already final while it holds
that lock: an increment waiting for it adds after the recount, whose snapshot was taken after
the lock and so saw every instance committed before it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from beatflow.store.base import StoreBase
from beatflow.store.fan_in_sql import completed, ended_count
from beatflow.store.models import map_fan_ins, map_items
from beatflow.store.records import INSERT_CHUNK

f = map_fan_ins.c


class FanInsMixin(StoreBase):
    def record_map_items(
        self, dag_id: str, run_id: str, task_id: str, items: Sequence[Any]
    ) -> None:
        """Write the items a .map() task expands into, one row per instance (``map_index`` =
        position), before its instances are sent: each instance then reads its own row. Again
        for the same task (a redelivered or cleared expansion) overwrites them, in one
        transaction of multi-row inserts of at most ``INSERT_CHUNK``."""
        rows = [
            {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": i, "item": item}
            for i, item in enumerate(items)
        ]
        insert = self._insert(map_items)
        upsert = insert.on_conflict_do_update(
            index_elements=["dag_id", "run_id", "task_id", "map_index"],
            set_={"item": insert.excluded.item},
        )
        action = f"recording the {len(rows)} items of task {task_id!r} of DAG run {dag_id}/{run_id}"
        with self._write(action, transaction=True) as conn:
            for start in range(0, len(rows), INSERT_CHUNK):
                conn.execute(upsert, rows[start : start + INSERT_CHUNK])

    def open_fan_in(
        self, dag_id: str, run_id: str, task_id: str, total: int, canvas: dict[str, Any]
    ) -> bool:
        """Open (or, for a redelivered or cleared expansion, reopen) the fan-in of ``task_id``'s
        ``total`` instances with the ``canvas`` to continue once they have all ended; the
        instances already final are counted. True if they all are (then nothing will count the
        last one: the caller continues the canvas itself)."""
        pk = (f.dag_id == dag_id, f.run_id == run_id, f.task_id == task_id)
        insert = self._insert(map_fan_ins).values(
            dag_id=dag_id, run_id=run_id, task_id=task_id, total=total, final=0, canvas=canvas
        )
        upsert = insert.on_conflict_do_update(
            index_elements=["dag_id", "run_id", "task_id"],
            set_={"total": insert.excluded.total, "canvas": insert.excluded.canvas},
        )
        ended = ended_count(dag_id, run_id, task_id, total)
        recount = sa.update(map_fan_ins).where(*pk).values(final=ended).returning(f.final)
        action = f"opening the fan-in of task {task_id!r} of DAG run {dag_id}/{run_id}"
        with self._write(action, transaction=True) as conn:
            conn.execute(upsert)  # holds the row's lock to commit: increments wait
            final = conn.execute(recount).scalar_one()  # a snapshot taken after the lock
        return bool(final >= total)

    def recount_fan_in(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any] | None:
        """Recount an expansion's ended instances (after a writer that does not count them,
        such as the task runs a deploy-skewed chunk fails); the canvas to continue when they
        have all ended, None otherwise or without a fan-in."""
        pk = (f.dag_id == dag_id, f.run_id == run_id, f.task_id == task_id)
        lock = self._backend.lock_rows(sa.select(f.total).where(*pk))
        action = f"recounting the fan-in of task {task_id!r} of DAG run {dag_id}/{run_id}"
        with self._write(action, transaction=True) as conn:
            total = conn.execute(lock).scalar()
            if total is None:
                return None
            recount = (
                sa.update(map_fan_ins)
                .where(*pk)
                .values(final=ended_count(dag_id, run_id, task_id, total))
                .returning(f.final, f.total, f.canvas)
            )
            return completed(conn.execute(recount).mappings().first())

    def fan_in_state(self, dag_id: str, run_id: str, task_id: str) -> tuple[int, int] | None:
        """(final, total) of an expansion's fan-in; None if it has none."""
        query = sa.select(f.final, f.total).where(
            f.dag_id == dag_id, f.run_id == run_id, f.task_id == task_id
        )
        with self._read(f"reading the fan-in of task {task_id!r} of {dag_id}/{run_id}") as conn:
            row = conn.execute(query).first()
        return None if row is None else (row.final, row.total)
