"""Schedule sync: the scheduled DAGs of the dags folder become RedBeat-style entries in Redis with
stable names (``beatflow:redbeat:dag:<dag_id>``). Every replica may compute the specs; only the
lock holder writes, inside a MULTI that WATCHes the lock (a replica without the lock never
writes an entry). Idempotent: an unchanged spec (same fingerprint) is not written again."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import redis

from beatflow.dag.loader import DagBag
from beatflow.scheduler import keys
from beatflow.scheduler.plan import ScheduleSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SyncResult:
    written: int
    removed: int
    unchanged: int
    applied: bool  # False when the lock changed hands during the write (nothing written)


def specs_of(bag: DagBag) -> dict[str, ScheduleSpec]:
    """The schedule specs of every scheduled DAG that loaded."""
    out: dict[str, ScheduleSpec] = {}
    for dag in bag.dags.values():
        spec = ScheduleSpec.from_dag(dag)
        if spec is not None:
            out[dag.dag_id] = spec
    return out


def write_entries(
    client: redis.Redis, token: str, specs: Mapping[str, ScheduleSpec], now: datetime
) -> SyncResult:
    """Make Redis hold exactly ``specs``: new and changed entries are written and due at once
    (the planner then applies the watermark and the catch-up rules), gone ones are removed.
    Watermarks are kept, so a DAG whose module breaks and comes back does not fire twice."""
    stored: dict[str, str] = client.hgetall(keys.FINGERPRINTS)  # type: ignore[assignment]
    changed = [s for s in specs.values() if stored.get(s.dag_id) != s.fingerprint()]
    removed = sorted(set(stored) - set(specs))
    unchanged = len(specs) - len(changed)
    if not changed and not removed:
        return SyncResult(0, 0, unchanged, True)
    score = now.timestamp()
    with client.pipeline(transaction=True) as pipe:
        try:
            pipe.watch(keys.LOCK)  # type: ignore[no-untyped-call]
            if pipe.get(keys.LOCK) != token:
                return SyncResult(0, 0, unchanged, False)
            pipe.multi()
            for spec in changed:
                entry = keys.entry_key(spec.dag_id)
                pipe.hset(entry, "definition", json.dumps(spec.definition()))
                pipe.zadd(keys.SCHEDULE, {entry: score})
                pipe.hset(keys.FINGERPRINTS, spec.dag_id, spec.fingerprint())
            for dag_id in removed:
                entry = keys.entry_key(dag_id)
                pipe.delete(entry)
                pipe.zrem(keys.SCHEDULE, entry)
                pipe.hdel(keys.FINGERPRINTS, dag_id)
            pipe.execute()
        except redis.WatchError:
            return SyncResult(0, 0, unchanged, False)
    for spec in changed:
        log.info(
            "beat: schedule of DAG %s synced: %s",
            spec.dag_id,
            spec.schedule.describe(),
            extra={"dag_id": spec.dag_id},
        )
    for dag_id in removed:
        log.info(
            "beat: DAG %s is no longer loaded: its schedule entry is removed",
            dag_id,
            extra={"dag_id": dag_id},
        )
    return SyncResult(len(changed), len(removed), unchanged, True)
