"""Pools (migration 0023): named slot limits that hold across every worker exactly.

A pooled task run claims its dedupe key and its pool's slots in one transaction: the pool's
row is locked first (a row lock on PostgreSQL; SQLite's write transaction holds the database's
lock already), then the slots its running holds use are summed, and only if this task's slots
fit is the key claimed and its hold (``pool_slots``, state ``used``, with the claim's lease
token) written. A hold counts while its task run is ``running`` under that token, so whatever
ends the row (the finish, a failure, the reconciler, a cancel) gives the slots back in the very
statement that ends it, and a takeover of a SIGKILLed worker's expired lease (a new token)
moves the slots to the new try in the takeover's transaction. A task that does not fit records
a ``queued`` row (``seen_at`` refreshed at each wait) and is retried later by the caller.

Task runs without a pool never come here: their claim is the plain one (``task_runs``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa

from beatflow.errors import StoreError
from beatflow.store.audit import audit_insert
from beatflow.store.base import StoreBase
from beatflow.store.claim_sql import fresh_lease
from beatflow.store.engine import utcnow
from beatflow.store.models import is_running, pool_slots, pools, task_runs
from beatflow.store.records import TASK_RUN_TERMINAL_STATES, TASK_RUNNING, AuditNote, Claim
from beatflow.store.rows import task_run_record

# a queued row counts while its task waited this recently (a wait is retried well within it)
QUEUED_SEEN_SECONDS = 60.0
POOL_STATES = ("used", "queued", "free")

ps = pool_slots.c
PoolWait = Literal["full", "missing"]


@dataclass(frozen=True, slots=True)
class PoolRecord:
    """A pool and what its slots are doing now (``free`` may be negative after a shrink)."""

    name: str
    slots: int
    description: str | None
    updated_at: datetime
    used: int = 0
    queued: int = 0

    @property
    def free(self) -> int:
        return self.slots - self.used


@dataclass(frozen=True, slots=True)
class PoolClaim:
    """A pooled claim: ``claim`` as ``claim_task_run`` gives it, or None with ``wait`` "full"
    (no slots: the task waits); ``wait`` "missing" with a claim: no such pool (the task fails)."""

    claim: Claim | None
    wait: PoolWait | None = None
    used: int = 0
    slots: int = 0


@dataclass(frozen=True, slots=True)
class PoolWaiter:
    """A task run waiting for a pool's slots."""

    dedupe_key: str
    pool: str
    slots: int
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    since: datetime


def _holding() -> sa.ColumnElement[bool]:
    """Holds that count: their task run is running under the hold's token."""
    return sa.exists().where(
        task_runs.c.dedupe_key == ps.dedupe_key,
        is_running(task_runs.c.state),
        task_runs.c.lease_token == ps.lease_token,
    )


class PoolsMixin(StoreBase):
    def set_pool(
        self,
        name: str,
        slots: int,
        description: str | None = None,
        *,
        audit: AuditNote | None = None,
    ) -> PoolRecord:
        """Create pool ``name`` or resize it (and keep its description unless one is given);
        ``audit`` is recorded in the same transaction."""
        if slots < 0:
            raise StoreError(f"a pool's slots must be 0 or more, got {slots}")
        now = utcnow()
        values: dict[str, Any] = {"slots": slots, "updated_at": now}
        if description is not None:
            values["description"] = description
        stmt = self._insert(pools).values(name=name, description=description, slots=slots,
                                          updated_at=now)  # fmt: skip
        with self._write(f"setting pool {name!r}", transaction=audit is not None) as conn:
            conn.execute(stmt.on_conflict_do_update(index_elements=["name"], set_=values))
            if audit is not None:
                conn.execute(audit_insert(audit, None, None, pool=name, slots=slots))
        found = self.get_pool(name)
        assert found is not None
        return found

    def delete_pool(self, name: str, *, audit: AuditNote | None = None) -> bool:
        """Delete pool ``name``; False if there is none (nothing recorded). Its tasks that have
        not started yet fail; the running ones finish."""
        with self._write(f"deleting pool {name!r}", transaction=True) as conn:
            deleted = conn.execute(sa.delete(pools).where(pools.c.name == name)).rowcount == 1
            if deleted and audit is not None:
                conn.execute(audit_insert(audit, None, None, pool=name))
            return deleted

    def get_pool(self, name: str) -> PoolRecord | None:
        return next((p for p in self.list_pools() if p.name == name), None)

    def list_pools(self) -> list[PoolRecord]:
        """Every pool with its used and queued slots, by name."""
        since = utcnow() - timedelta(seconds=QUEUED_SEEN_SECONDS)
        queued = sa.and_(ps.state == "queued", ps.seen_at > since)
        counted = sa.or_(sa.and_(ps.state == "used", _holding()), queued)
        usage = (
            sa.select(ps.pool, ps.state, sa.func.sum(ps.slots))
            .where(counted)
            .group_by(ps.pool, ps.state)
        )
        with self._read("listing pools") as conn:
            rows = conn.execute(sa.select(pools).order_by(pools.c.name)).mappings().all()
            counts = {(p, s): int(n) for p, s, n in conn.execute(usage)}
        return [
            PoolRecord(
                name=r["name"],
                slots=r["slots"],
                description=r["description"],
                updated_at=r["updated_at"],
                used=counts.get((r["name"], "used"), 0),
                queued=counts.get((r["name"], "queued"), 0),
            )
            for r in rows
        ]

    def pool_waiters(self, dag_id: str, run_id: str) -> list[PoolWaiter]:
        """The task runs of a DAG run now waiting for a pool's slots."""
        since = utcnow() - timedelta(seconds=QUEUED_SEEN_SECONDS)
        query = sa.select(pool_slots).where(
            ps.dag_id == dag_id, ps.run_id == run_id, ps.state == "queued", ps.seen_at > since
        )
        with self._read(f"reading the pool waits of {dag_id}/{run_id}") as conn:
            rows = conn.execute(query.order_by(ps.task_id, ps.map_index)).mappings().all()
        return [
            PoolWaiter(
                dedupe_key=r["dedupe_key"], pool=r["pool"], slots=r["slots"], dag_id=r["dag_id"],
                run_id=r["run_id"], task_id=r["task_id"], map_index=r["map_index"],
                since=r["since"],
            )
            for r in rows
        ]  # fmt: skip

    def claim_pooled(
        self,
        dedupe_key: str,
        *,
        pool: str,
        slots: int,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int = -1,
        worker: str | None = None,
        celery_task_id: str | None = None,
    ) -> PoolClaim:
        """Claim ``dedupe_key`` and ``slots`` of ``pool`` in one transaction (module doc)."""
        sql = self._backend.claims
        now = utcnow()
        token = uuid.uuid4().hex
        identity = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}
        params = {
            **{f"p_{k}": v for k, v in identity.items()},
            "p_dedupe_key": dedupe_key,
            "p_key": dedupe_key,
            **fresh_lease(now, self.lease_seconds, token, worker=worker,
                          celery_task_id=celery_task_id),
        }  # fmt: skip
        locked = self._backend.lock_rows(sa.select(pools.c.slots).where(pools.c.name == pool))
        used_by_others = sa.select(sa.func.coalesce(sa.func.sum(ps.slots), 0)).where(
            ps.pool == pool, ps.state == "used", ps.dedupe_key != dedupe_key, _holding()
        )
        hold = {"pool": pool, "slots": slots, "seen_at": now, **identity}
        with self._write(f"claiming task run {dedupe_key!r} in pool {pool!r}",
                         transaction=True) as conn:  # fmt: skip
            limit = conn.execute(locked).scalar_one_or_none()
            used = int(conn.execute(used_by_others).scalar_one())
            if limit is not None and used + slots > limit:
                current = conn.execute(sql.current, {"p_key": dedupe_key}).mappings().first()
                if current is not None and current["state"] in TASK_RUN_TERMINAL_STATES:
                    return PoolClaim(Claim("done", task_run_record(current), None))
                if (
                    current is not None
                    and current["state"] == TASK_RUNNING
                    and (current["lease_expires_at"] is None or current["lease_expires_at"] > now)
                ):
                    return PoolClaim(Claim("held", task_run_record(current), None))
                waiting = {**hold, "state": "queued", "lease_token": None}
                self._upsert_hold(conn, dedupe_key, now, waiting)
                return PoolClaim(None, "full", used, limit)
            row = conn.execute(sql.insert, params).mappings().first()
            if row is None:
                row = conn.execute(sql.take_over, params).mappings().first()
            if row is not None:
                if limit is not None:
                    self._upsert_hold(conn, dedupe_key, now,
                                      {**hold, "state": "used", "lease_token": token})  # fmt: skip
                missing: PoolWait | None = "missing" if limit is None else None
                return PoolClaim(
                    Claim("run", task_run_record(row), token), missing, used, limit or 0
                )
            current = conn.execute(sql.current, {"p_key": dedupe_key}).mappings().first()
        if current is None:
            raise StoreError(f"could not claim task run {dedupe_key!r}: it was pruned; retry")
        if current["state"] in TASK_RUN_TERMINAL_STATES:
            return PoolClaim(Claim("done", task_run_record(current), None))
        return PoolClaim(Claim("held", task_run_record(current), None))

    def _upsert_hold(
        self, conn: sa.Connection, dedupe_key: str, now: datetime, values: dict[str, Any]
    ) -> None:
        stmt = self._insert(pool_slots).values(dedupe_key=dedupe_key, since=now, **values)
        update = dict(values)
        if values["state"] == "used":
            update["since"] = now
        conn.execute(stmt.on_conflict_do_update(index_elements=["dedupe_key"], set_=update))
