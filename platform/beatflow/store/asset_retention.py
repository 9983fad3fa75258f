"""The retention of asset events: prune deletes the old ones every consumer has consumed, with
their consumptions, and folds what it deletes into the totals tables (migration 0026) in the
same transaction, so the counters read here (totals plus the rows left) never go down."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from beatflow.errors import StoreError
from beatflow.store.asset_models import (
    asset_consumptions,
    asset_event_totals,
    asset_events,
    asset_run_totals,
)
from beatflow.store.audit import audit_insert
from beatflow.store.base import StoreBase
from beatflow.store.engine import utcnow
from beatflow.store.records import AuditNote

# any constant: two prunes of asset events take turns (PostgreSQL; SQLite's writes do anyway),
# so one sees the consumptions the other deleted before it decides a run has none left
PRUNE_LOCK = 0x6265_6174_6170


def event_source(source_key: str) -> str:
    """The counter's ``source`` label of an event: "task" or "external" (an emit)."""
    return "task" if source_key.startswith("task:") else "external"


def _source(column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    return sa.case((column.like("task:%"), "task"), else_="external")


class AssetRetentionMixin(StoreBase):
    def prune_asset_events(
        self,
        older_than: timedelta,
        consumers: Mapping[str, Collection[str]],
        *,
        batch_size: int = 500,
        on_batch: Callable[[int], None] | None = None,
        audit: AuditNote | None = None,
    ) -> int:
        """Delete the asset events created before now - ``older_than`` that every DAG of
        ``consumers`` (asset -> the dag_ids scheduled on it; an asset not in it has none) has
        consumed, with their consumptions, ``batch_size`` events per transaction; returns the
        events deleted. The newest event of all is kept (SQLite would give its id to the next
        event, and an asset run's id is its newest event's). Each transaction adds what it
        deletes to the totals: an interrupted prune leaves every count where it was.
        ``on_batch(n)`` is called after each committed batch; ``audit``: the operator's record,
        with ``asset_events_deleted`` in its detail, written in the last batch's transaction."""
        if older_than < timedelta(0):
            raise StoreError(f"prune: older_than={older_than} must not be negative")
        if batch_size < 1:
            raise StoreError(f"prune: batch_size={batch_size} must be at least 1")
        pick = _prunable(utcnow() - older_than, consumers)
        deleted, after = 0, 0
        while True:
            with self._write("pruning old asset events", transaction=True) as conn:
                self._backend.take_turns(conn, PRUNE_LOCK)
                ids = list(conn.execute(pick.where(asset_events.c.id > after)
                                        .limit(batch_size)).scalars())  # fmt: skip
                last = len(ids) < batch_size
                if last and audit is not None:
                    conn.execute(
                        audit_insert(audit, None, None, asset_events_deleted=deleted + len(ids))
                    )
                if not ids:
                    return deleted
                gone = self._delete_and_fold(conn, ids)
            deleted += gone
            after = max(ids)
            if on_batch is not None:
                on_batch(gone)
            if last:
                return deleted

    def _delete_and_fold(self, conn: sa.Connection, ids: list[int]) -> int:
        """Delete the events ``ids`` and their consumptions; add them to the totals: an event
        by its (asset, source), a run once its last consumption is gone."""
        e, c = asset_events.c, asset_consumptions.c
        events = conn.execute(
            sa.delete(asset_events).where(e.id.in_(ids)).returning(e.asset, e.source_key)
        ).all()
        counts = Counter((asset, event_source(key)) for asset, key in events)
        for (asset, source), n in sorted(counts.items()):
            self._add(conn, asset_event_totals, {"asset": asset, "source": source}, "events", n)
        used = conn.execute(
            sa.delete(asset_consumptions).where(c.event_id.in_(ids)).returning(c.dag_id, c.run_id)
        ).all()
        touched = {(dag_id, run_id) for dag_id, run_id in used}
        if touched:
            query = sa.select(c.dag_id, c.run_id).where(self._of_runs(asset_consumptions, touched))
            left = {(dag_id, run_id) for dag_id, run_id in conn.execute(query.distinct()).all()}
            runs = Counter(dag_id for dag_id, _ in touched - left)
            for dag_id, n in sorted(runs.items()):
                self._add(conn, asset_run_totals, {"dag_id": dag_id}, "runs", n)
        return len(events)

    def _add(
        self, conn: sa.Connection, table: sa.Table, key: dict[str, Any], column: str, n: int
    ) -> None:
        insert = self._insert(table).values(**key, **{column: n})
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=list(key),
                set_={column: table.c[column] + insert.excluded[column]},
            )
        )

    def asset_event_totals(self) -> dict[tuple[str, str], int]:
        """Per (asset, source) the events ever recorded: source "task" (a producing task run's
        success) or "external" (an emit), as ``AssetEventRecord.to_json`` names them. One
        statement (the pruned totals plus the rows left), so a prune's commit is seen whole."""
        e, t = asset_events.c, asset_event_totals.c
        source = _source(e.source_key)
        rows = sa.select(e.asset, source.label("source"), sa.func.count().label("n")).group_by(
            e.asset, source
        )
        both = sa.union_all(sa.select(t.asset, t.source, t.events.label("n")), rows).subquery()
        query = sa.select(both.c.asset, both.c.source, sa.func.sum(both.c.n)).group_by(
            both.c.asset, both.c.source
        )
        with self._read("counting asset events by source") as conn:
            return {(a, str(s)): int(n) for a, s, n in conn.execute(query).all()}

    def asset_triggered_run_totals(self) -> dict[str, int]:
        """Per DAG the runs asset events created: the pruned totals plus the runs the
        consumptions left name, in one statement."""
        c, t = asset_consumptions.c, asset_run_totals.c
        rows = sa.select(c.dag_id, sa.func.count(sa.distinct(c.run_id)).label("n")).group_by(
            c.dag_id
        )
        both = sa.union_all(sa.select(t.dag_id, t.runs.label("n")), rows).subquery()
        query = sa.select(both.c.dag_id, sa.func.sum(both.c.n)).group_by(both.c.dag_id)
        with self._read("counting asset-triggered runs") as conn:
            return {d: int(n) for d, n in conn.execute(query).all()}


def _prunable(cutoff: Any, consumers: Mapping[str, Collection[str]]) -> sa.Select[Any]:
    """The events created before ``cutoff`` that every consumer of their asset consumed, but
    the newest event of all, oldest first."""
    e, c = asset_events.c, asset_consumptions.c
    consumed = {a: sorted(set(dags)) for a, dags in consumers.items() if dags}
    newest = sa.select(sa.func.max(e.id)).scalar_subquery()
    by_all = [
        sa.and_(
            e.asset == asset,
            *(
                sa.exists(sa.select(c.event_id).where(c.dag_id == dag_id, c.event_id == e.id))
                for dag_id in dags
            ),
        )
        for asset, dags in sorted(consumed.items())
    ]
    return (
        sa.select(e.id)
        .where(
            e.created_at < cutoff,
            e.id < newest,
            sa.or_(e.asset.not_in(sorted(consumed)), *by_all),
        )
        .order_by(e.id)
    )
