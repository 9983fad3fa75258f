"""The beat's side of the results DB: the leader-epoch fence (a deposed leader that wakes up
cannot add a run once a newer epoch was recorded; its runs are created behind it, see
``run_creation``) and the catch-up fallback (the latest scheduled tick)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from beatflow.errors import StaleLeaderError
from beatflow.store.backends import Backend
from beatflow.store.base import StoreBase
from beatflow.store.engine import UTCDateTime, utcnow
from beatflow.store.models import beat_terms, dag_runs
from beatflow.store.records import TRIGGER_BACKFILL, TRIGGER_CATCHUP, TRIGGER_SCHEDULED

TERM = "beat"
SCHEDULED_TRIGGERS = (TRIGGER_SCHEDULED, TRIGGER_CATCHUP, TRIGGER_BACKFILL)


class BeatTermsMixin(StoreBase):
    def epoch_floor(self) -> int:
        """The newest beat leader epoch recorded (0 before any)."""
        query = sa.select(beat_terms.c.epoch).where(beat_terms.c.name == TERM)
        with self._read("reading the beat leader epoch") as conn:
            value = conn.execute(query).scalar_one_or_none()
        return int(value or 0)

    def raise_epoch_floor(self, epoch: int) -> int:
        """Record ``epoch`` as the newest leader epoch unless a newer one is recorded; return the
        newest. A new leader calls this first, so the old leader's later writes are refused."""
        with self._write(f"recording beat leader epoch {epoch}", transaction=True) as conn:
            return raise_fence(conn, self._backend, epoch, refuse=False)

    def latest_scheduled_logical_date(self, dag_id: str) -> datetime | None:
        """The latest tick among the DAG's scheduled, caught-up and backfilled runs: where the
        beat resumes when Redis lost its watermark (a manual run's date says nothing of ticks)."""
        column = sa.func.max(dag_runs.c.logical_date, type_=UTCDateTime())
        query = sa.select(column).where(
            dag_runs.c.dag_id == dag_id, dag_runs.c.trigger.in_(SCHEDULED_TRIGGERS)
        )
        with self._read(f"reading the latest scheduled tick of DAG {dag_id}") as conn:
            value: datetime | None = conn.execute(query).scalar_one()
        return value


def raise_fence(conn: sa.Connection, backend: Backend, epoch: int, *, refuse: bool) -> int:
    """In ``conn``'s transaction: lock the term row until commit, raise it to ``epoch``; return
    the newest epoch. ``refuse``: raise StaleLeaderError when a newer epoch is recorded. The
    lock orders a new leader's first write after any run an old leader is committing."""
    epoch = int(epoch)
    conn.execute(
        backend.insert(beat_terms)
        .values(name=TERM, epoch=0, updated_at=utcnow())
        .on_conflict_do_nothing(index_elements=["name"])
    )
    select = sa.select(beat_terms.c.epoch).where(beat_terms.c.name == TERM)
    newest = int(conn.execute(select.with_for_update()).scalar_one())
    if refuse and newest > epoch:
        raise StaleLeaderError(epoch, newest)
    if epoch > newest:
        conn.execute(
            sa.update(beat_terms)
            .where(beat_terms.c.name == TERM)
            .values(epoch=epoch, updated_at=utcnow())
        )
        newest = epoch
    return newest
