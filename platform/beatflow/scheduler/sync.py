"""Schedule sync: the scheduled DAGs of the dags folder become RedBeat-style entries in Redis with
stable names (``beatflow:redbeat:dag:<dag_id>``). Every replica may compute the specs; only the
lock holder writes, inside a MULTI that WATCHes the lock (a replica without the lock never
writes an entry). Idempotent: an unchanged spec (same fingerprint) is not written again."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis
from celery import schedules
from redbeat.decoder import RedBeatJSONEncoder

from beatflow import keys
from beatflow.dag.loader import DagBag
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


def redbeat_definition(spec: ScheduleSpec) -> str:
    """The DAG's entry as RedBeat stores one: a disabled ``beatflow.fire_schedule`` entry whose
    schedule is the nearest Celery schedule (RedBeat has no per-entry time zone)."""
    sched = spec.schedule
    celery_schedule: schedules.BaseSchedule
    if sched.interval is not None:
        celery_schedule = schedules.schedule(sched.interval)
    else:
        fields = (sched.cron or "").split()
        if len(fields) == 5:
            minute, hour, dom, month, dow = fields
            celery_schedule = schedules.crontab(minute, hour, dow, dom, month)
        else:  # a seconds field: RedBeat's crontab cannot say it
            celery_schedule = schedules.schedule(timedelta(minutes=1))
    return json.dumps(
        {
            "name": keys.entry_key(spec.dag_id)[len(keys.REDBEAT_PREFIX) :],
            "task": "beatflow.fire_schedule",
            "schedule": celery_schedule,
            "args": [spec.dag_id],
            "kwargs": {},
            "options": {},
            "enabled": False,  # beatflow fires DAGs from its watermarks, never RedBeat's loop
        },
        cls=RedBeatJSONEncoder,
    )


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
            pipe.watch(keys.LOCK)
            if pipe.get(keys.LOCK) != token:
                return SyncResult(0, 0, unchanged, False)
            pipe.multi()
            for spec in changed:
                entry = keys.entry_key(spec.dag_id)
                pipe.hset(
                    entry,
                    mapping={
                        "definition": redbeat_definition(spec),
                        keys.SPEC_FIELD: json.dumps(spec.definition()),
                    },
                )
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
