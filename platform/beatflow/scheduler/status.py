"""What ``beatflow beat status`` and ``beatflow health beat`` read from Redis: the leader, the
lock's remaining TTL, the replicas (with the age of their tick loop's last completed pass) and
the next due schedule entries."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis

from beatflow import keys


@dataclass(frozen=True, slots=True)
class BeatStatus:
    leader: dict[str, Any] | None
    lock_ttl_seconds: float | None  # None: no beat holds the lock
    epoch: int
    replicas: list[dict[str, Any]] = field(default_factory=list)
    next_due: list[dict[str, Any]] = field(default_factory=list)
    entries: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def loop_age(replica: dict[str, Any], now: float | None = None) -> float | None:
    """Seconds since the replica's tick loop last completed a pass (None if unknown)."""
    seen = replica.get("loop_seen")
    if seen is None:
        return None
    return max(0.0, (time.time() if now is None else now) - float(seen))


def is_stalled(replica: dict[str, Any], now: float | None = None) -> bool:
    """True when the replica's loop has not completed a pass within its stall timeout."""
    age, bound = loop_age(replica, now), replica.get("stall_timeout")
    return age is not None and bound is not None and age > float(bound)


def read_replicas(client: redis.Redis) -> list[dict[str, Any]]:
    """Every live replica's heartbeat, with ``loop_age_seconds`` and ``stalled`` added."""
    replicas = []
    now = time.time()
    for key in client.scan_iter(match=keys.REPLICA_PREFIX + "*", count=100):
        raw = client.get(key)
        if raw:
            replica = json.loads(raw)
            age = loop_age(replica, now)
            replica["loop_age_seconds"] = None if age is None else round(age, 3)
            replica["stalled"] = is_stalled(replica, now)
            replicas.append(replica)
    replicas.sort(key=lambda r: str(r.get("instance")))
    return replicas


def read_status(client: redis.Redis, *, limit: int = 10) -> BeatStatus:
    with client.pipeline(transaction=False) as pipe:
        pipe.get(keys.LEADER)
        pipe.pttl(keys.LOCK)
        pipe.get(keys.EPOCH)
        pipe.zrangebyscore(keys.SCHEDULE, 0, "+inf", start=0, num=limit, withscores=True)
        pipe.zcard(keys.SCHEDULE)
        leader_raw, pttl, epoch, head, total = pipe.execute()
    replicas = read_replicas(client)
    due = [_due_entry(client, entry, float(score)) for entry, score in head]
    return BeatStatus(
        leader=json.loads(leader_raw) if leader_raw else None,
        lock_ttl_seconds=None if int(pttl) < 0 else int(pttl) / 1000,
        epoch=int(epoch or 0),
        replicas=replicas,
        next_due=due,
        entries=int(total),
    )


def _due_entry(client: redis.Redis, entry: str, score: float) -> dict[str, Any]:
    """A DAG's entry (beatflow's spec) or a plain periodic task's (RedBeat's definition)."""
    due_at = datetime.fromtimestamp(score, UTC).isoformat()
    if keys.is_dag_entry(entry):
        raw = client.hget(entry, keys.SPEC_FIELD)
        spec = json.loads(raw) if raw else {}
        return {
            "kind": "dag",
            "dag_id": keys.dag_id_of(entry),
            "schedule": spec.get("schedule"),
            "due_at": due_at,
        }
    raw = client.hget(entry, "definition")
    definition = json.loads(raw) if raw else {}
    return {
        "kind": "task",
        "name": definition.get("name", entry[len(keys.REDBEAT_PREFIX) :]),
        "task": definition.get("task"),
        "schedule": _describe(definition.get("schedule")),
        "enabled": definition.get("enabled", True),
        "due_at": due_at,
    }


def _describe(schedule: Any) -> str | None:
    if not isinstance(schedule, dict):
        return None if schedule is None else str(schedule)
    if schedule.get("__type__") == "interval":
        return f"every {schedule.get('every')}s"
    if schedule.get("__type__") == "crontab":
        fields = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
        return "crontab " + " ".join(str(schedule.get(f, "*")) for f in fields)
    return str(schedule.get("__type__", "schedule"))
