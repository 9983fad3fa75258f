"""Asset events and their consumption (data-aware scheduling, migration 0025).

An event is one update of an asset: a producing task run's success (``source_key``
``task:<dedupe key>#<try>/<asset>``: a redelivered task that finds its key done records nothing
new, and recording it twice inserts once) or an event from outside (``emit``). An asset-triggered
run is created in one fenced transaction with the rows that consume its events
(``asset_consumptions``, primary key (dag_id, event_id)): each event triggers each DAG at most
once, whatever the beats and their failovers do."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from beatflow.store.asset_models import asset_consumptions, asset_events
from beatflow.store.asset_retention import event_source
from beatflow.store.audit import audit_insert
from beatflow.store.base import StoreBase
from beatflow.store.beat_terms import raise_fence
from beatflow.store.engine import require_aware, utcnow
from beatflow.store.models import task_runs
from beatflow.store.records import AuditNote, DagRunRecord, ScheduledRunDraft
from beatflow.store.sql import check_conf, insert_runs, run_values


@dataclass(frozen=True, slots=True)
class AssetEventRecord:
    """One stored update of an asset."""

    id: int
    asset: str
    source_key: str
    dag_id: str | None
    run_id: str | None
    task_id: str | None
    actor: str | None
    extra: dict[str, Any]
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "asset": self.asset,
            "source": event_source(self.source_key),
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "actor": self.actor,
            "extra": self.extra,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class ProducedUpdate:
    """A producing task run's success, to record as events of its outlets."""

    dedupe_key: str
    try_number: int
    dag_id: str
    run_id: str
    task_id: str


def task_source_key(dedupe_key: str, try_number: int, asset: str) -> str:
    return f"task:{dedupe_key}#{try_number}/{asset}"


def _record(row: sa.RowMapping) -> AssetEventRecord:
    return AssetEventRecord(
        id=int(row["id"]),
        asset=row["asset"],
        source_key=row["source_key"],
        dag_id=row["dag_id"],
        run_id=row["run_id"],
        task_id=row["task_id"],
        actor=row["actor"],
        extra=dict(row["extra"] or {}),
        created_at=row["created_at"],
    )


class AssetsMixin(StoreBase):
    def emit_asset_event(
        self, asset: str, *, extra: dict[str, Any] | None = None, audit: AuditNote | None = None
    ) -> AssetEventRecord:
        """Record an update of ``asset`` from outside, with the operator's ``audit`` record
        in the same transaction."""
        values = {
            "asset": asset,
            "source_key": f"emit:{uuid.uuid4().hex}",
            "actor": None if audit is None else audit.actor[:250],
            "extra": check_conf(extra, f"extra of the event of asset {asset!r}"),
            "created_at": utcnow(),
        }
        with self._write(f"recording an event of asset {asset!r}", transaction=True) as conn:
            row = (
                conn.execute(sa.insert(asset_events).values(**values).returning(*asset_events.c))
                .mappings()
                .one()
            )
            if audit is not None:
                conn.execute(audit_insert(audit, None, None, asset=asset, event_id=row["id"]))
        return _record(row)

    def produced_updates(
        self, producers: Collection[tuple[str, str]], since: datetime
    ) -> list[ProducedUpdate]:
        """The successful task runs of ``producers`` ((dag_id, task_id) with outlets) that
        ended at or after ``since``."""
        if not producers:
            return []
        t = task_runs.c
        of = sa.or_(*(sa.and_(t.dag_id == d, t.task_id == k) for d, k in sorted(producers)))
        query = sa.select(t.dedupe_key, t.try_number, t.dag_id, t.run_id, t.task_id).where(
            t.state == "success", t.ended_at >= require_aware(since, "since"), of
        )
        with self._read("reading the successes of asset producers") as conn:
            return [ProducedUpdate(*r) for r in conn.execute(query).all()]

    def record_produced_events(
        self, updates: Iterable[tuple[ProducedUpdate, Collection[str]]]
    ) -> int:
        """The events of producing task runs' successes (each with its outlets): insert or
        ignore by source key, so recording one twice changes nothing. Returns how many are new."""
        now = utcnow()
        rows: list[dict[str, Any]] = [
            {
                "asset": asset,
                "source_key": task_source_key(u.dedupe_key, u.try_number, asset),
                "dag_id": u.dag_id,
                "run_id": u.run_id,
                "task_id": u.task_id,
                "actor": None,
                "extra": {},
                "created_at": now,
            }
            for u, outlets in updates
            for asset in sorted(outlets)
        ]
        if not rows:
            return 0
        keys = [r["source_key"] for r in rows]
        with self._write("recording asset events of producing tasks", transaction=True) as conn:
            known = set(
                conn.execute(
                    sa.select(asset_events.c.source_key).where(asset_events.c.source_key.in_(keys))
                ).scalars()
            )
            fresh = [r for r in rows if r["source_key"] not in known]
            for start in range(0, len(fresh), 200):
                conn.execute(
                    self._insert(asset_events)
                    .values(fresh[start : start + 200])
                    .on_conflict_do_nothing(index_elements=["source_key"])
                )
        return len(fresh)

    def unconsumed_asset_events(
        self, dag_id: str, assets: Collection[str], *, limit: int = 1000
    ) -> list[AssetEventRecord]:
        """The events of ``assets`` that no run of ``dag_id`` consumed yet, oldest first."""
        e, c = asset_events.c, asset_consumptions.c
        consumed = sa.select(c.event_id).where(c.dag_id == dag_id, c.event_id == e.id)
        query = (
            sa.select(asset_events)
            .where(e.asset.in_(sorted(assets)), ~sa.exists(consumed))
            .order_by(e.id)
            .limit(limit)
        )
        with self._read(f"reading the unconsumed asset events of DAG {dag_id}") as conn:
            return [_record(r) for r in conn.execute(query).mappings()]

    def create_asset_run(
        self, draft: ScheduledRunDraft, event_ids: Collection[int], *, leader_epoch: int
    ) -> DagRunRecord | None:
        """In one transaction, fenced by the beat leader's epoch (StaleLeaderError): consume
        ``event_ids`` for the draft's DAG and create its run. None, and nothing written, when
        any of the events is consumed already (by an earlier run of the DAG)."""
        ids = sorted(int(i) for i in event_ids)
        c = asset_consumptions.c
        values = run_values(
            draft.dag_id,
            draft.run_id,
            logical_date=draft.logical_date,
            trigger=draft.trigger,
            conf=draft.conf,
            leader_epoch=leader_epoch,
            now=utcnow(),
            failure_reason=draft.failure_reason,
        )
        action = f"creating asset-triggered DAG run {draft.dag_id}/{draft.run_id}"
        with self._write(action, transaction=True) as conn:
            raise_fence(conn, self._backend, leader_epoch, refuse=True)
            taken = conn.execute(
                sa.select(c.event_id).where(c.dag_id == draft.dag_id, c.event_id.in_(ids)).limit(1)
            ).first()
            if taken is not None:
                return None
            now = utcnow()
            conn.execute(
                sa.insert(asset_consumptions),
                [
                    {"dag_id": draft.dag_id, "event_id": i, "run_id": draft.run_id,
                     "consumed_at": now}
                    for i in ids
                ],
            )  # fmt: skip
            ((run, _),) = insert_runs(conn, self._backend, [values])
        return run

    def list_asset_events(
        self, asset: str | None = None, *, limit: int = 20
    ) -> list[AssetEventRecord]:
        """Asset events newest first (of one asset when given)."""
        e = asset_events.c
        query = sa.select(asset_events).order_by(e.id.desc()).limit(max(0, limit))
        if asset is not None:
            query = query.where(e.asset == asset)
        with self._read("listing asset events") as conn:
            return [_record(r) for r in conn.execute(query).mappings()]

    def asset_event_counts(self) -> dict[str, tuple[int, int]]:
        """Per asset with events: (event count, newest event id)."""
        e = asset_events.c
        query = sa.select(e.asset, sa.func.count(), sa.func.max(e.id)).group_by(e.asset)
        with self._read("counting asset events") as conn:
            return {a: (int(n), int(m)) for a, n, m in conn.execute(query).all()}

    def asset_consumers_of(self, event_ids: Collection[int]) -> dict[int, list[tuple[str, str]]]:
        """Per event id, the (dag_id, run_id) that consumed it."""
        if not event_ids:
            return {}
        c = asset_consumptions.c
        query = sa.select(c.event_id, c.dag_id, c.run_id).where(c.event_id.in_(sorted(event_ids)))
        out: dict[int, list[tuple[str, str]]] = {}
        with self._read("reading asset consumptions") as conn:
            for event_id, dag_id, run_id in conn.execute(query).all():
                out.setdefault(int(event_id), []).append((dag_id, run_id))
        return out
