"""Which ticks of one DAG are due: pure arithmetic over its schedule, its watermark (the tick fired
last) and now. No Redis, no Celery: the catch-up, failover-gap and end_date rules live here."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from beatflow.dag.model import DAG
from beatflow.dag.schedule import Schedule

_TINY = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """What the beat needs of a scheduled DAG; its fingerprint changes when any of it changes."""

    dag_id: str
    schedule: Schedule
    start_date: datetime | None
    end_date: datetime | None
    catchup: bool
    max_active_runs: int

    @classmethod
    def from_dag(cls, dag: DAG) -> ScheduleSpec | None:
        if dag.schedule is None:
            return None
        return cls(
            dag.dag_id, dag.schedule, dag.start_date, dag.end_date, dag.catchup, dag.max_active_runs
        )

    def definition(self) -> dict[str, object]:
        s = self.schedule
        return {
            "dag_id": self.dag_id,
            "task": "beatflow.fire_schedule",
            "schedule": s.describe(),
            "cron": s.cron,
            "interval_seconds": None if s.interval is None else s.interval.total_seconds(),
            "timezone": s.timezone.key,
            "anchor": s.anchor.isoformat(),
            "start_date": None if self.start_date is None else self.start_date.isoformat(),
            "end_date": None if self.end_date is None else self.end_date.isoformat(),
            "catchup": self.catchup,
            "max_active_runs": self.max_active_runs,
        }

    def fingerprint(self) -> str:
        raw = json.dumps(self.definition(), sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Fire:
    """One tick to fire: its logical date and the trigger kind the DAG run records."""

    tick: datetime
    trigger: str  # "scheduled" for the latest due tick, "catchup" for older ones


@dataclass(frozen=True, slots=True)
class Plan:
    fires: list[Fire]
    watermark: datetime | None  # the watermark after these fires
    next_due: datetime | None  # when to look at this DAG again; None: the schedule has ended


def plan_fires(
    spec: ScheduleSpec,
    watermark: datetime | None,
    now: datetime,
    *,
    failover_grace: timedelta,
    catchup_window: timedelta,
    limit: int,
) -> Plan:
    """The ticks of ``spec`` to fire at ``now`` given the tick fired last (``watermark``).

    - Ticks after ``end_date`` or before ``start_date`` never fire.
    - Ticks due within ``failover_grace`` of now always fire: they fell into a failover gap.
    - Older missed ticks fire only with ``catchup=True`` (and no older than ``catchup_window``);
      with ``catchup=False`` only the latest due tick fires.
    - A DAG never seen before (no watermark, no start_date) fires only its latest tick.
    - At most ``limit`` fires, oldest first; the rest stay due for the next call.
    """
    sched = spec.schedule
    if sched.once:
        return _plan_once(spec, watermark, now)
    horizon = now if spec.end_date is None else min(now, spec.end_date)
    latest = sched.prev_at_or_before(horizon)
    if latest is not None and spec.start_date is not None and latest < spec.start_date:
        latest = None
    if latest is None or (watermark is not None and latest <= watermark):
        return Plan([], watermark, _next_due(spec, watermark, now))
    after = watermark
    if after is None and spec.start_date is not None:
        after = spec.start_date - _TINY
    if after is None:
        candidates = [latest]
    else:
        floor = now - (catchup_window if spec.catchup else failover_grace)
        lower = max(after, floor - _TINY)
        candidates = list(itertools.islice(sched.ticks(lower, latest), limit + 1))
        if not spec.catchup and latest not in candidates:
            candidates.append(latest)
    truncated = len(candidates) > limit
    candidates = candidates[:limit]
    fires = [Fire(t, "scheduled" if t == latest else "catchup") for t in candidates]
    new_watermark = candidates[-1] if truncated else latest
    next_due = now if truncated else _next_due(spec, new_watermark, now)
    return Plan(fires, new_watermark, next_due)


def _plan_once(spec: ScheduleSpec, watermark: datetime | None, now: datetime) -> Plan:
    """``@once``: its one tick (the start_date) fires when due, whatever ``catchup`` and the
    catch-up window say, unless a scheduled run already exists (the watermark, or the store's
    latest scheduled run when the watermark is lost); then the entry leaves the index."""
    tick = spec.schedule.anchor
    if watermark is not None and watermark >= tick:
        return Plan([], watermark, None)
    if (spec.end_date is not None and tick > spec.end_date) or tick > now:
        return Plan([], watermark, None if spec.end_date and tick > spec.end_date else tick)
    return Plan([Fire(tick, "scheduled")], tick, None)


def _next_due(spec: ScheduleSpec, watermark: datetime | None, now: datetime) -> datetime | None:
    base = now if watermark is None else max(watermark, now)
    if spec.start_date is not None and base < spec.start_date:
        base = spec.start_date - _TINY
    nxt = spec.schedule.next_after(base)
    if spec.end_date is not None and nxt > spec.end_date:
        return None
    return nxt
