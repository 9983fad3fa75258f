"""What ``beatflow beat status`` shows, read from Redis: the leader, the lock's remaining TTL,
the replicas and the next due schedule entries."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis

from beatflow.scheduler import keys


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


def read_status(client: redis.Redis, *, limit: int = 10) -> BeatStatus:
    with client.pipeline(transaction=False) as pipe:
        pipe.get(keys.LEADER)
        pipe.pttl(keys.LOCK)
        pipe.get(keys.EPOCH)
        pipe.zrange(keys.SCHEDULE, 0, limit - 1, withscores=True)
        pipe.zcard(keys.SCHEDULE)
        leader_raw, pttl, epoch, head, total = pipe.execute()
    replicas = []
    for key in client.scan_iter(match=keys.REPLICA_PREFIX + "*", count=100):
        raw = client.get(key)
        if raw:
            replicas.append(json.loads(raw))
    replicas.sort(key=lambda r: str(r.get("instance")))
    due = []
    for entry, score in head:
        dag_id = keys.dag_id_of(entry)
        definition = client.hget(entry, "definition")
        schedule = json.loads(definition).get("schedule") if definition else None
        due.append(
            {
                "dag_id": dag_id,
                "schedule": schedule,
                "due_at": datetime.fromtimestamp(float(score), UTC).isoformat(),
            }
        )
    return BeatStatus(
        leader=json.loads(leader_raw) if leader_raw else None,
        lock_ttl_seconds=None if int(pttl) < 0 else int(pttl) / 1000,
        epoch=int(epoch or 0),
        replicas=replicas,
        next_due=due,
        entries=int(total),
    )
