"""What the exporter reads from Redis: each queue's length summed over its priority sub-lists
(the layout is :class:`beatflow.queues.QueueLayout`), the backlog
(queued + reserved + running: with acks_late every reserved or running message sits in kombu's
``unacked`` hash), and which beat replica holds the scheduler lock (keys documented in
``beatflow.scheduler``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from beatflow.keys import EPOCH as EPOCH_KEY
from beatflow.keys import LEADER as LEADER_KEY
from beatflow.keys import REPLICA_PREFIX
from beatflow.queues import QueueLayout

log = logging.getLogger(__name__)


def queue_lengths(
    client: redis.Redis, layout: QueueLayout, queues: Sequence[str]
) -> dict[str, int]:
    """Messages waiting per queue, every priority sub-list summed (one round trip)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        for name in layout.lists(queue):
            pipe.llen(name)
    counts = iter(pipe.execute())
    steps = len(layout.priority_steps)
    return {queue: sum(int(next(counts)) for _ in range(steps)) for queue in queues}


def in_flight(client: redis.Redis, layout: QueueLayout) -> dict[str, int]:
    """Messages delivered to workers and not acknowledged yet (reserved or running), by queue
    (kombu's unacked hash holds ``[message, exchange, routing_key]`` per delivery tag)."""
    out: dict[str, int] = {}
    for _, raw in client.hscan_iter(layout.unacked, count=1000):
        try:
            routing_key = json.loads(raw)[2]
        except (ValueError, IndexError, TypeError):
            continue
        out[str(routing_key)] = out.get(str(routing_key), 0) + 1
    return out


@dataclass(frozen=True, slots=True)
class Leader:
    """The beat replica holding the lock as Redis says now (``instance`` None: nobody)."""

    instance: str | None
    epoch: int
    replicas: tuple[str, ...]


def read_leader(client: redis.Redis) -> Leader:
    """The current leader, the epoch counter and every live replica's instance name."""
    pipe = client.pipeline(transaction=False)
    pipe.get(LEADER_KEY)
    pipe.get(EPOCH_KEY)
    raw_leader, raw_epoch = pipe.execute()
    instance: str | None = None
    epoch = _int(raw_epoch)
    if raw_leader:
        try:
            data = json.loads(raw_leader)
            instance = str(data["instance"])
            epoch = max(epoch, _int(data.get("epoch")))
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable beat leader record %r at %s", raw_leader[:200], LEADER_KEY)
    replicas = sorted(
        _decode(k)[len(REPLICA_PREFIX) :] for k in client.scan_iter(REPLICA_PREFIX + "*", count=100)
    )
    return Leader(instance=instance, epoch=epoch, replicas=tuple(replicas))


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LeaderTracker:
    """Turns successive leader readings into the leader gauge and the failover counter: every
    epoch step after the first reading is one change of holder."""

    def __init__(self) -> None:
        self.instances: set[str] = set()
        self.epoch: int | None = None
        self.current: str | None = None

    def observe(self, leader: Leader) -> tuple[dict[str, int], int]:
        """Return (gauge value per instance, failovers since the last reading)."""
        failovers = 0
        if self.epoch is not None and leader.epoch > self.epoch:
            failovers = leader.epoch - self.epoch
        if leader.epoch:
            self.epoch = max(self.epoch or 0, leader.epoch)
        if leader.instance is not None and leader.instance != self.current:
            log.info(
                "beat leader is now %s (epoch %d)",
                leader.instance,
                leader.epoch,
                extra={
                    "event": "beat_leader_changed",
                    "instance": leader.instance,
                    "epoch": leader.epoch,
                },
            )
        elif leader.instance is None and self.current is not None:
            log.warning(
                "no beat holds the scheduler lock (last leader: %s)",
                self.current,
                extra={"event": "beat_leader_lost", "instance": self.current},
            )
        self.current = leader.instance
        self.instances |= set(leader.replicas)
        if leader.instance is not None:
            self.instances.add(leader.instance)
        return {i: int(i == leader.instance) for i in sorted(self.instances)}, failovers
