"""Firing due ticks: read the due entries from the schedule index, plan each DAG's fires from its
watermark, send them in small batch messages, then advance the watermarks and due times of the
DAGs whose fires all went out in one fenced Lua call (a beat that lost the lock writes nothing).
Work per call is bounded."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis

from beatflow.scheduler import keys
from beatflow.scheduler.plan import Fire, ScheduleSpec, plan_fires

log = logging.getLogger(__name__)

# KEYS: lock, watermark hash, schedule zset; ARGV: token, then triples
# (dag_id, watermark iso or "", score or "-" to drop from the index)
_ADVANCE = (
    """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 3 do
  local dag_id, wm, score = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if wm ~= '' then redis.call('hset', KEYS[2], dag_id, wm) end
  if score == '-' then
    redis.call('zrem', KEYS[3], '"""
    + keys.ENTRY_PREFIX
    + """' .. dag_id)
  else
    redis.call('zadd', KEYS[3], score, '"""
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
    send: Send
    failover_grace: timedelta
    catchup_window: timedelta
    latest_logical_date: Callable[[str], datetime | None]
    paused_dag_ids: Callable[[], set[str]]
    newest_epoch: Callable[[], int]
    budget: int = 2000  # fires (and due entries) per call: bounds the work of one tick
    batch: int = 50  # fires per message
    specs: Mapping[str, ScheduleSpec] | None = None

    def __post_init__(self) -> None:
        self._advance = self.client.register_script(_ADVANCE)
        self._paused: set[str] = set()

    def fire_due(self, now: datetime, lease: tuple[str, int]) -> FireResult:
        token, epoch = lease
        specs = self.specs or {}
        due: list[str] = self.client.zrangebyscore(  # type: ignore[assignment]
            keys.SCHEDULE, "-inf", now.timestamp(), start=0, num=self.budget
        )
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
                    skip = None if spec.catchup else spec.schedule.prev_at_or_before(now)
                    wm = (
                        ""
                        if skip is None or (watermark and skip <= watermark)
                        else skip.isoformat()
                    )
                    updates[dag_id] = (wm, str(spec.schedule.next_after(now).timestamp()))
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
        fired = 0
        for i in range(0, len(pending), self.batch):
            chunk = pending[i : i + self.batch]
            try:
                self.send(chunk, epoch)
            except Exception as exc:  # noqa: BLE001 - the broker is down: retry next tick
                unsent = {dag_id for dag_id, _ in pending[i:]}
                log.warning("beat: sending fires failed (%s); %d DAGs stay due", exc, len(unsent))
                for dag_id in unsent:  # their watermarks stay: fired again, deduped by run id
                    updates.pop(dag_id, None)
                break
            fired += len(chunk)
        fenced_out = False
        if updates:
            args = [token]
            for dag_id, (wm, score) in updates.items():
                args += [dag_id, wm, score]
            fenced_out = not self._advance(
                keys=[keys.LOCK, keys.WATERMARK, keys.SCHEDULE], args=args
            )
            if fenced_out:
                log.warning(
                    "beat: lost the lock while firing; %d fires were sent and will "
                    "collapse into the same DAG runs if fired again",
                    fired,
                )
        head = self.client.zrange(keys.SCHEDULE, 0, 0, withscores=True)
        next_due = float(head[0][1]) if head else None
        more = len(due) >= self.budget or len(pending) >= self.budget
        return FireResult(fired, more, next_due, fenced_out)

    def refresh_paused(self) -> None:
        try:
            self._paused = set(self.paused_dag_ids())
        except Exception as exc:  # noqa: BLE001 - the DB is down: keep the last known set
            log.warning("beat: cannot read paused DAGs (%s); using the last known set", exc)

    def latest_epoch(self) -> int:
        """The leader epoch of the newest DAG run in the results DB (0 if none or unknown)."""
        try:
            return int(self.newest_epoch())
        except Exception as exc:  # noqa: BLE001
            log.warning("beat: cannot read the newest leader epoch (%s)", exc)
            return 0

    def _from_store(self, dag_id: str) -> datetime | None:
        """No watermark in Redis (first start, or Redis lost its data): resume after the latest
        DAG run recorded in the results DB."""
        try:
            return self.latest_logical_date(dag_id)
        except Exception as exc:  # noqa: BLE001
            log.warning("beat: cannot read the last run of DAG %s (%s)", dag_id, exc)
            return None


def _parse(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
