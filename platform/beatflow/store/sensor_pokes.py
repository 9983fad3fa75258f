"""A sensor's pokes in reschedule mode (``sensor_pokes``): a poke that was not done ends its try
``up_for_reschedule`` and records the try's poke count, first poke and next poke in the same
transaction, under the poke's lease; the next poke reads them back after its claim."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.store.base import StoreBase
from beatflow.store.engine import utcnow
from beatflow.store.models import dag_runs, sensor_pokes, task_runs
from beatflow.store.records import TASK_RUNNING, TASK_UP_FOR_RESCHEDULE, DagRunRecord, SensorPokes
from beatflow.store.rows import dag_run_record
from beatflow.store.text import ERROR_MAX_CHARS, clean_text


def _record(row: Any) -> SensorPokes:
    return SensorPokes(
        dedupe_key=row["dedupe_key"],
        task_id=row["task_id"],
        map_index=row["map_index"],
        try_number=row["try_number"],
        poke_count=row["poke_count"],
        first_poke_at=row["first_poke_at"],
        next_poke_at=row["next_poke_at"],
    )


class SensorPokesMixin(StoreBase):
    def reschedule_task_run(
        self, dedupe_key: str, token: str, pokes: SensorPokes, *, note: str | None = None
    ) -> bool:
        """End a claimed sensor try ``up_for_reschedule`` (its lease given back, ``note`` as its
        error: why it waits) and record its ``pokes``, in one transaction, only while ``token``
        holds the lease. False (nothing written) when the lease was taken over."""
        t = task_runs.c
        with self._write(f"rescheduling task run {dedupe_key!r}", transaction=True) as conn:
            row = conn.execute(
                sa.update(task_runs)
                .where(t.dedupe_key == dedupe_key, t.lease_token == token, t.state == TASK_RUNNING)
                .values(
                    state=TASK_UP_FOR_RESCHEDULE,
                    error=clean_text(note, ERROR_MAX_CHARS),
                    ended_at=utcnow(),
                    lease_token=None,
                    lease_expires_at=None,
                )
                .returning(t.dag_id, t.run_id)
            ).first()
            if row is None:
                return False
            values = {
                "try_number": pokes.try_number,
                "poke_count": pokes.poke_count,
                "first_poke_at": pokes.first_poke_at,
                "next_poke_at": pokes.next_poke_at,
            }
            upsert = (
                self._insert(sensor_pokes)
                .values(
                    dedupe_key=dedupe_key,
                    dag_id=row.dag_id,
                    run_id=row.run_id,
                    task_id=pokes.task_id,
                    map_index=pokes.map_index,
                    **values,
                )
                .on_conflict_do_update(index_elements=["dedupe_key"], set_=values)
            )
            conn.execute(upsert)
            return True

    def sensor_pokes(self, dedupe_key: str) -> SensorPokes | None:
        """The pokes recorded for a sensor task run (of its latest try that rescheduled)."""
        query = sa.select(sensor_pokes).where(sensor_pokes.c.dedupe_key == dedupe_key)
        with self._read(f"reading the pokes of task run {dedupe_key!r}") as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _record(row)

    def sensor_pokes_of_run(self, dag_id: str, run_id: str) -> list[SensorPokes]:
        """The sensor pokes recorded for a DAG run's task runs (the reconciler's, the UI's)."""
        query = sa.select(sensor_pokes).where(
            sensor_pokes.c.dag_id == dag_id, sensor_pokes.c.run_id == run_id
        )
        with self._read(f"reading the sensor pokes of DAG run {dag_id}/{run_id}") as conn:
            rows = conn.execute(query).mappings().all()
        return [_record(r) for r in rows]

    def dag_runs_at(self, dag_id: str, logical_date: datetime) -> list[DagRunRecord]:
        """The runs of ``dag_id`` for ``logical_date`` (what ``ExternalRun`` waits for)."""
        query = (
            sa.select(dag_runs)
            .where(dag_runs.c.dag_id == dag_id, dag_runs.c.logical_date == logical_date)
            .order_by(dag_runs.c.id)
        )
        with self._read(f"reading the runs of DAG {dag_id} at {logical_date}") as conn:
            rows = conn.execute(query).mappings().all()
        return [dag_run_record(r) for r in rows]
