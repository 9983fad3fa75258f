"""Firing due ticks: read the due entries from the schedule index, plan each DAG's fires from its
watermark, create the ticks' DAG runs in the results DB (fenced by the leader epoch, one
transaction per chunk of fires: creation.py), advance the watermarks and due times in one fenced
Lua call (token and epoch checked where they land), then send the batch messages that make
workers dispatch the runs. Each DAG on its own: one DAG's bad fire never holds another's; a
watermark never passes a tick whose run does not exist. Work per call is bounded."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import redis

from beatflow import keys
from beatflow.dag.schedule import NEVER
from beatflow.scheduler.creation import CHUNK, Create, CreateMany, create_runs
from beatflow.scheduler.plan import Fire, ScheduleSpec, plan_fires
from beatflow.times import parse_instant

log = logging.getLogger(__name__)

# KEYS: lock, epoch, watermark hash, schedule zset; ARGV: token, epoch, then triples
# (dag_id, watermark iso or "", score or "-" to drop from the index)
_ADVANCE = (
    """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('get', KEYS[2]) ~= ARGV[2] then return 0 end
for i = 3, #ARGV, 3 do
  local dag_id, wm, score = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if wm ~= '' then redis.call('hset', KEYS[3], dag_id, wm) end
  if score == '-' then
    redis.call('zrem', KEYS[4], '"""
    + keys.ENTRY_PREFIX
    + """' .. dag_id)
  else
    redis.call('zadd', KEYS[4], score, '"""
    + keys.ENTRY_PREFIX
    + """' .. dag_id)
  end
end
return 1
"""
)

# sends one message carrying a batch of (dag_id, fire) pairs, stamped with the leader epoch
Send = Callable[[Sequence[tuple[str, Fire]], int], None]


@dataclass(frozen=True, slots=True)
class FireResult:
    fired: int
    more: bool  # the budget ran out: call again at once
    next_due: float | None  # unix time of the next due entry, if any
    fenced_out: bool = False  # the lock changed hands: nothing was recorded


@dataclass
class Dispatcher:
    """Fires the due ticks of the DAGs in ``specs`` (replaced wholesale by each sync)."""

    client: redis.Redis
    create: Create  # one tick's run: the fallback for a chunk one DAG's bad fire failed
    send: Send
    failover_grace: timedelta
    catchup_window: timedelta
    latest_logical_date: Callable[[str], datetime | None]  # of the DAG's scheduled runs
    paused_dag_ids: Callable[[], set[str]]
    newest_epoch: Callable[[], int]
    create_many: CreateMany  # the runs of a chunk of fires, in one fenced call
    budget: int = 2000  # fires (and due entries) per call: bounds the work of one tick
    batch: int = 50  # fires per message
    chunk: int = CHUNK  # fires per fenced call creating their runs
    specs: Mapping[str, ScheduleSpec] | None = None
    unsent: list[tuple[str, Fire]] = field(default_factory=list)  # runs made, message not sent

    def __post_init__(self) -> None:
        self._advance = self.client.register_script(_ADVANCE)
        self._paused: set[str] = set()

    def fire_due(self, now: datetime, lease: tuple[str, int]) -> FireResult:
        token, epoch = lease
        specs = self.specs or {}
        # plain RedBeat entries share the index: they are the scheduler's, not ours (a key
        # that is not a DAG's must never be taken for a DAG id)
        indexed: list[str] = self.client.zrangebyscore(  # type: ignore[assignment]
            keys.SCHEDULE, 0, now.timestamp(), start=0, num=self.budget
        )
        due = [e for e in indexed if keys.is_dag_entry(e)]
        updates: dict[str, tuple[str, str]] = {}  # dag_id -> (new watermark or "", score)
        pending: list[tuple[str, Fire]] = []
        if due:
            self.refresh_paused()
            dag_ids = [keys.dag_id_of(e) for e in due]
            marks: list[str | None] = self.client.hmget(  # type: ignore[assignment]
                keys.WATERMARK, dag_ids
            )
            for dag_id, mark in zip(dag_ids, marks, strict=True):
                if len(pending) >= self.budget:
                    break
                spec = specs.get(dag_id)
                if spec is None:  # not loaded (yet, or any more): the sync decides its fate
                    updates[dag_id] = ("", str((now + timedelta(seconds=5)).timestamp()))
                    continue
                watermark = _parse(mark) if mark else self._from_store(dag_id)
                if dag_id in self._paused:
                    # catchup=True holds the watermark (the paused ticks run on unpause);
                    # catchup=False skips them: the watermark follows the clock
                    # (an @once DAG keeps its one tick: it fires once unpaused)
                    keep = spec.catchup or spec.schedule.once
                    skip = None if keep else spec.schedule.prev_at_or_before(now)
                    wm = (
                        ""
                        if skip is None or (watermark and skip <= watermark)
                        else skip.isoformat()
                    )
                    nxt = spec.schedule.next_after(now)
                    if spec.schedule.once and nxt == NEVER:  # look again soon: it may unpause
                        nxt = now + timedelta(seconds=5)
                    updates[dag_id] = (wm, str(nxt.timestamp()))
                    continue
                plan = plan_fires(
                    spec,
                    watermark,
                    now,
                    failover_grace=self.failover_grace,
                    catchup_window=self.catchup_window,
                    limit=self.budget - len(pending),
                )
                pending += [(dag_id, fire) for fire in plan.fires]
                wm = (
                    ""
                    if plan.watermark is None or plan.watermark == watermark
                    else plan.watermark.isoformat()
                )
                updates[dag_id] = (
                    wm,
                    "-" if plan.next_due is None else str(plan.next_due.timestamp()),
                )
        created = create_runs(
            pending,
            epoch=epoch,
            now=now,
            updates=updates,
            create=self.create,
            create_many=self.create_many,
            chunk=self.chunk,
        )
        made, fenced_out, retry_at = created.made, created.fenced_out, created.retry_at
        if updates and not fenced_out:
            args: list[str | int] = [token, epoch]
            for dag_id, (wm, score) in updates.items():
                args += [dag_id, wm, score]
            fenced_out = not self._advance(
                keys=[keys.LOCK, keys.EPOCH, keys.WATERMARK, keys.SCHEDULE], args=args
            )
            if fenced_out:
                log.warning(
                    "beat: lost the lock while firing (epoch %d); the %d runs made stay queued "
                    "for the new leader",
                    epoch,
                    len(made),
                )
        fired = 0 if fenced_out else self._send_all(made, epoch)
        next_due = self._next_dag_due(now)
        if retry_at is not None:
            next_due = min(next_due or retry_at, retry_at)
        more = not fenced_out and (len(indexed) >= self.budget or len(pending) >= self.budget)
        return FireResult(fired, more, next_due, fenced_out)

    def _next_dag_due(self, now: datetime) -> float | None:
        """Unix time the next DAG entry is due (looking a little past a plain entry or two)."""
        head: list[tuple[str, float]] = self.client.zrangebyscore(  # type: ignore[assignment]
            keys.SCHEDULE, 0, "+inf", start=0, num=64, withscores=True
        )
        for entry, score in head:
            if keys.is_dag_entry(entry):
                return float(score)
        return None if len(head) < 64 else now.timestamp() + 1.0

    def _send_all(self, made: list[tuple[str, Fire]], epoch: int) -> int:
        """Send the dispatch messages of the runs made (and of those a failed send left)."""
        todo, self.unsent = self.unsent + made, []
        sent = 0
        for i in range(0, len(todo), self.batch):
            chunk = todo[i : i + self.batch]
            try:
                self.send(chunk, epoch)
            except Exception as exc:  # noqa: BLE001 - the broker is down: the runs wait queued
                self.unsent = todo[i:][: self.budget]
                log.warning(
                    "beat: sending fires failed (%s); %d runs wait queued, sent again next tick",
                    exc,
                    len(todo) - i,
                )
                break
            sent += len(chunk)
        return sent

    def refresh_paused(self) -> None:
        try:
            self._paused = set(self.paused_dag_ids())
        except Exception as exc:  # noqa: BLE001 - the DB is down: keep the last known set
            log.warning("beat: cannot read paused DAGs (%s); using the last known set", exc)

    def latest_epoch(self) -> int:
        """The newest leader epoch the results DB recorded (0 if none or unknown)."""
        try:
            return int(self.newest_epoch())
        except Exception as exc:  # noqa: BLE001
            log.warning("beat: cannot read the newest leader epoch (%s)", exc)
            return 0

    def _from_store(self, dag_id: str) -> datetime | None:
        """No watermark in Redis (first start, or Redis lost its data): resume after the latest
        *scheduled* DAG run recorded in the results DB (a manual run says nothing of ticks)."""
        try:
            return self.latest_logical_date(dag_id)
        except Exception as exc:  # noqa: BLE001
            log.warning("beat: cannot read the last run of DAG %s (%s)", dag_id, exc)
            return None


def _parse(value: str) -> datetime:
    return parse_instant(value)
