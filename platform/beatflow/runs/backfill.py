"""Backfill: create the DAG runs of a past range of ticks (``beatflow dags backfill``). The run
id derives from the tick exactly as a scheduled fire's does, so backfilling twice, or over ticks
the beat already fired, makes no second run."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from beatflow.errors import SchedulerError
from beatflow.runs.dispatch import send_started
from beatflow.runs.fire import scheduled_run_id
from beatflow.runtime import Runtime
from beatflow.store.records import AuditNote, ScheduledRunDraft
from beatflow.times import as_utc

if TYPE_CHECKING:
    from beatflow.store import DagRunRecord

log = logging.getLogger(__name__)

MAX_BACKFILL_TICKS = 10_000


def backfill_ticks(runtime: Runtime, dag_id: str, start: datetime, end: datetime) -> list[datetime]:
    """The ticks of ``dag_id`` in ``[start, end]``, inside its start_date/end_date, oldest first.
    ``end`` is clamped to now: a future tick is the beat's to fire, not a backfill's."""
    dag = runtime.dag(dag_id)
    if dag.schedule is None:
        raise SchedulerError(
            f'DAG "{dag_id}" has no schedule, so it has no ticks to backfill; '
            f"use `beatflow dags trigger {dag_id}` for a manual run"
        )
    start, end = as_utc(start), as_utc(end)
    if end < start:
        raise SchedulerError(
            f"backfill of {dag_id}: --end {end.isoformat()} is before --start {start.isoformat()}"
        )
    if dag.start_date is not None:
        start = max(start, dag.start_date)
    if dag.end_date is not None:
        end = min(end, dag.end_date)
    end = min(end, datetime.now(UTC))
    ticks: list[datetime] = []
    first = dag.schedule.prev_at_or_before(start)
    if first is not None and first >= start:
        ticks.append(first)
    for tick in dag.schedule.ticks(start, end):
        ticks.append(tick)
        if len(ticks) > MAX_BACKFILL_TICKS:
            raise SchedulerError(
                f"backfill of {dag_id} from {start.isoformat()} to {end.isoformat()} covers more "
                f"than {MAX_BACKFILL_TICKS} ticks; split it into smaller ranges"
            )
    return ticks


def backfill(
    runtime: Runtime,
    dag_id: str,
    start: datetime,
    end: datetime,
    *,
    actor: str | None = None,
    reason: str = "",
) -> list[DagRunRecord]:
    """Create (or find) one DAG run per tick in ``[start, end]``; extra runs beyond the DAG's
    max_active_runs wait queued. Returns the runs, oldest first.

    The runs are created in multi-row inserts (``store.create_dag_runs``), then the DAG's
    oldest queued runs are started and sent once: thousands of ticks cost a few round trips,
    not a trigger each. A conf the DAG refuses (a required param without a default) creates
    nothing; a broker that cannot be reached leaves the runs queued (BrokerUnavailableError;
    the reconciler, or the same backfill again, sends them). ``actor``: the operator who asked,
    recorded in the audit table (with ``reason``) in the transaction of the last runs written."""
    dag = runtime.dag(dag_id)
    ticks = backfill_ticks(runtime, dag_id, start, end)
    conf = dag.resolve_conf(None)
    drafts = [
        ScheduledRunDraft(dag_id, scheduled_run_id(tick), tick, "backfill", conf) for tick in ticks
    ]
    note = None
    if actor is not None:
        detail = {"start": as_utc(start).isoformat(), "end": as_utc(end).isoformat()}
        note = AuditNote(actor, "backfill", {**detail, "reason": reason})
    made = runtime.store.create_dag_runs(drafts, audit=note)
    if note is not None and not drafts:  # no runs to write it with
        done = {**note.detail, "runs": 0, "created": 0}
        runtime.store.record_audit(note.actor, "backfill", dag_id, None, done)
    runs = [record for record, _ in made]
    created = sum(new for _, new in made)
    log.info(
        "backfill of %s: %d runs, %d created",
        dag_id,
        len(runs),
        created,
        extra={"dag_id": dag_id},
    )
    started = runtime.store.start_queued_dag_runs(dag_id, dag.max_active_runs)
    send_started(runtime, dag_id, started)
    as_started = {r.run_id: r for r in started}
    return [as_started.get(r.run_id, r) for r in runs]
