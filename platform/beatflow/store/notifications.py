"""The notifications outbox (migration 0019): one row per notifier event, keyed by the event, so
that a redelivered or duplicated event is sent at most once. ``add_notification`` writes it
(``pending``) once the state it tells of is committed; ``take_notification`` is the one claim
(``pending`` -> ``sending``, one winner) before a send; ``end_notification`` records the
outcome; ``pending_notifications`` lists rows whose delivery message was lost."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.store.base import StoreBase
from beatflow.store.engine import require_aware, utcnow
from beatflow.store.models import ENDED, dag_runs, notifications
from beatflow.store.records import DagRunRecord
from beatflow.store.rows import dag_run_record
from beatflow.store.sql import check_conf

NOTIFICATION_STATES = ("pending", "sending", "sent", "failed")


@dataclass(frozen=True, slots=True)
class NotificationRecord:
    """One notifier event as the outbox holds it."""

    event_key: str
    dag_id: str
    run_id: str
    kind: str
    state: str
    payload: dict[str, Any]
    created_at: datetime
    claimed_at: datetime | None
    ended_at: datetime | None
    tries: int
    error: str | None


class NotificationsMixin(StoreBase):
    def add_notification(
        self, event_key: str, *, dag_id: str, run_id: str, kind: str, payload: dict[str, Any]
    ) -> bool:
        """Write the event ``event_key`` as pending; False (nothing written) when it exists
        already: a duplicated or redelivered event."""
        values = {
            "event_key": event_key,
            "dag_id": dag_id,
            "run_id": run_id,
            "kind": kind[:20],
            "state": "pending",
            "payload": check_conf(payload, f"notification {event_key}"),
            "created_at": utcnow(),
            "tries": 0,
        }
        insert = (
            self._insert(notifications)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["event_key"])
            .returning(notifications.c.event_key)
        )
        with self._write(f"recording notification {event_key}") as conn:
            return conn.execute(insert).first() is not None

    def take_notification(self, event_key: str) -> dict[str, Any] | None:
        """Claim a pending event for the one delivery that sends it (``sending``); its payload,
        or None when it is not pending (another delivery took it, or it does not exist)."""
        update = (
            sa.update(notifications)
            .where(notifications.c.event_key == event_key, notifications.c.state == "pending")
            .values(state="sending", claimed_at=utcnow())
            .returning(notifications.c.payload)
        )
        with self._write(f"claiming notification {event_key}") as conn:
            row = conn.execute(update).first()
        return None if row is None else dict(row[0] or {})

    def end_notification(
        self, event_key: str, *, state: str, tries: int, error: str | None = None
    ) -> None:
        """Record how the claimed event's delivery ended: ``sent`` or ``failed``."""
        if state not in ("sent", "failed"):
            raise ValueError(f"a notification ends sent or failed, not {state!r}")
        update = (
            sa.update(notifications)
            .where(notifications.c.event_key == event_key, notifications.c.state == "sending")
            .values(
                state=state, ended_at=utcnow(), tries=tries, error=(error or None) and error[:2000]
            )
        )
        with self._write(f"ending notification {event_key}") as conn:
            conn.execute(update)

    def pending_notifications(self, created_before: datetime, limit: int = 100) -> list[str]:
        """Keys of events still pending that were written before ``created_before`` (their
        delivery message was lost: the reconciler sends it again), oldest first."""
        before = require_aware(created_before, "created_before")
        query = (
            sa.select(notifications.c.event_key)
            .where(notifications.c.state == "pending", notifications.c.created_at < before)
            .order_by(notifications.c.created_at)
            .limit(limit)
        )
        with self._read("reading pending notifications") as conn:
            return [row[0] for row in conn.execute(query)]

    def existing_notifications(self, event_keys: Collection[str]) -> set[str]:
        """Which of ``event_keys`` the outbox holds (in any state)."""
        if not event_keys:
            return set()
        query = sa.select(notifications.c.event_key).where(
            notifications.c.event_key.in_(list(event_keys))
        )
        with self._read(f"reading {len(event_keys)} notification keys") as conn:
            return {row[0] for row in conn.execute(query)}

    def dag_runs_ended_between(
        self, dag_ids: Collection[str], start: datetime, end: datetime, *, limit: int
    ) -> list[DagRunRecord]:
        """Runs of ``dag_ids`` that ended in [``start``, ``end``), oldest first: the runs whose
        notifications the reconciler checks were written."""
        if not dag_ids:
            return []
        query = (
            sa.select(dag_runs)
            .where(
                ENDED,
                dag_runs.c.ended_at >= require_aware(start, "start"),
                dag_runs.c.ended_at < require_aware(end, "end"),
                dag_runs.c.dag_id.in_(list(dag_ids)),
            )
            .order_by(dag_runs.c.ended_at)
            .limit(limit)
        )
        with self._read("reading recently ended runs") as conn:
            return [dag_run_record(r) for r in conn.execute(query).mappings()]

    def get_notification(self, event_key: str) -> NotificationRecord | None:
        """The event ``event_key`` as the outbox holds it."""
        query = sa.select(notifications).where(notifications.c.event_key == event_key)
        with self._read(f"reading notification {event_key}") as conn:
            row = conn.execute(query).mappings().first()
        return (
            None
            if row is None
            else NotificationRecord(**{**row, "payload": dict(row["payload"] or {})})
        )

    def list_notifications(
        self, dag_id: str, run_id: str | None = None
    ) -> list[NotificationRecord]:
        """The events of a DAG (of one of its runs), oldest first."""
        query = sa.select(notifications).where(notifications.c.dag_id == dag_id)
        if run_id is not None:
            query = query.where(notifications.c.run_id == run_id)
        with self._read(f"reading notifications of {dag_id}") as conn:
            rows = conn.execute(query.order_by(notifications.c.created_at)).mappings().all()
        return [NotificationRecord(**{**r, "payload": dict(r["payload"] or {})}) for r in rows]

    def page_notifications(
        self,
        *,
        dag_id: str | None = None,
        run_id: str | None = None,
        state: str | None = None,
        kind: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[NotificationRecord], int | None]:
        """The outbox newest first, filtered (each filter optional); ``limit`` rows from
        ``offset`` and the offset of the next page (None on the last)."""
        n = notifications.c
        query = sa.select(notifications)
        for column, value in ((n.dag_id, dag_id), (n.run_id, run_id), (n.state, state),
                              (n.kind, kind)):  # fmt: skip
            if value is not None:
                query = query.where(column == value)
        query = query.order_by(n.created_at.desc(), n.event_key.desc())
        with self._read("reading the notifications outbox") as conn:
            rows = conn.execute(query.offset(offset).limit(limit + 1)).mappings().all()
        found = [NotificationRecord(**{**r, "payload": dict(r["payload"] or {})}) for r in rows]
        more = len(found) > limit
        return found[:limit], (offset + limit if more else None)
